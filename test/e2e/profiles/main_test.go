//go:build e2e

// Package profiles_test runs `apportion webhook` with a runtime-class
// profile (--runtime-class-profiles) against a real control plane with
// Karpenter's kwok provider (test/cluster), and checks the peer-pods rewrite
// end to end: the API server applies apportion's patch (with the RuntimeClass
// admission plugin's overhead), the rewritten pod is scheduled on the node
// that advertises the extended resource, a strategy on the same workload
// still places it, and pods of another runtime class are left as they were
// sent.
package profiles_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	// gateTimeout is the replica's --gate-timeout.
	gateTimeout = 30 * time.Second
	// kataRemote is the profiled runtime class; runc is another one.
	kataRemote = "kata-remote"
	runc       = "runc"
	// vmResource is the profile's extended resource; vmNodePool is the
	// NodePool of the node that advertises it (seed 004's strategy sends
	// its first pods to on-demand, and on-demand-amd64 is that group's
	// pool by weight).
	vmResource = corev1.ResourceName("kata.peerpods.io/vm")
	vmNodePool = "on-demand-amd64"
	// profilesFlag is the chart's RUNTIME_CLASS_PROFILES for kata-remote.
	profilesFlag = `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","quantity":"1","keepRequests":true}]`
)

var env struct {
	c       *cluster.Cluster
	kube    client.Client
	bin     string
	certDir string
	lb      *framework.Balancer
	replica *framework.Replica
	// vmNode is the node that advertises vmResource.
	vmNode string
}

func TestMain(m *testing.M) {
	flag.Parse()
	start := time.Now()
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		code = 1
	}
	if env.c != nil {
		if code != 0 {
			if env.replica != nil {
				fmt.Fprintf(os.Stderr, "--- %s log tail\n%s\n", env.replica.Name, tailLog(env.replica.Name, 60))
			}
			env.c.DumpLogs(os.Stderr, 40)
		}
		if err := env.c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping cluster: %v\n", err)
		}
	}
	fmt.Fprintf(os.Stderr, "profiles e2e: wall time %s\n", time.Since(start).Round(time.Second))
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp("", "apportion-e2e-profiles-")
	if err != nil {
		return 1, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if env.bin, err = framework.BuildApportion(ctx, tmp, os.Stderr); err != nil {
		return 1, err
	}
	// E2E_LOG_DIR keeps every component's and the replica's log after the run.
	env.c, err = cluster.Start(ctx, cluster.Options{Karpenter: true, Progress: os.Stderr, LogDir: os.Getenv("E2E_LOG_DIR")})
	if err != nil {
		return 1, err
	}
	env.kube = env.c.Client()
	if err := framework.Apply(ctx, env.kube, filepath.Join(framework.RepoRoot(), "test", "testdata", "karpenter")); err != nil {
		return 1, err
	}
	if err := framework.WaitNodePoolsReady(ctx, env.kube); err != nil {
		return 1, err
	}
	if err := env.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: framework.SystemNamespace}}); err != nil {
		return 1, err
	}
	if err := createRuntimeClasses(ctx); err != nil {
		return 1, err
	}
	env.certDir = filepath.Join(tmp, "certs")
	if err := os.MkdirAll(env.certDir, 0o700); err != nil {
		return 1, err
	}
	if _, _, err := env.c.IssueServingCert(env.certDir); err != nil {
		return 1, err
	}
	if env.lb, err = framework.NewBalancer(env.c); err != nil {
		return 1, err
	}
	defer env.lb.Close()
	if err := framework.Register(ctx, env.kube, env.c.CABundle(), env.lb.Port); err != nil {
		return 1, err
	}
	// The replica stops before its certificate folder goes.
	defer func() {
		if env.replica != nil {
			env.replica.Stop()
		}
	}()
	if err := startReplica(ctx); err != nil {
		return 1, err
	}
	if err := advertiseVMs(ctx); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// createRuntimeClasses creates kata-remote, with the peer-pods webhook's
// hack/rc.yaml overhead, and runc.
func createRuntimeClasses(ctx context.Context) error {
	for _, rc := range []*nodev1.RuntimeClass{
		{ObjectMeta: metav1.ObjectMeta{Name: kataRemote}, Handler: kataRemote, Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("120Mi"),
		}}},
		{ObjectMeta: metav1.ObjectMeta{Name: runc}, Handler: runc},
	} {
		if err := env.kube.Create(ctx, rc); err != nil {
			return fmt.Errorf("creating RuntimeClass %s: %w", rc.Name, err)
		}
	}
	return nil
}

// startReplica starts one `apportion webhook` with the kata-remote profile
// behind the balancer, and waits for it to serve and lead.
func startReplica(ctx context.Context) error {
	r, err := framework.StartReplica(env.c, env.bin, env.certDir, "apportion-1", gateTimeout, "--runtime-class-profiles="+profilesFlag)
	if err != nil {
		return err
	}
	env.replica = r
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := r.WaitReady(wctx); err != nil {
		return fmt.Errorf("%w: %s", err, tailLog(r.Name, 20))
	}
	env.lb.Set(r.Port)
	for !framework.LeaderAlive(wctx, env.kube) {
		select {
		case <-wctx.Done():
			return fmt.Errorf("no placement leader: %w", wctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// advertiseVMs has Karpenter launch a node in vmNodePool (for a small
// anchor pod, in a namespace apportion ignores) and gives that node 10 of
// vmResource, as the peer-pods extended-resources DaemonSet would: the
// node's status capacity and allocatable. kwok keeps them (its stages only
// copy what the status already says), and Karpenter's kwok instance types
// offer no such resource, so this node is the only place peer pods fit.
func advertiseVMs(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vm-node", Labels: map[string]string{framework.IgnoreLabel: "true"}}}
	if err := env.kube.Create(ctx, ns); err != nil {
		return err
	}
	anchor := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "anchor"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"karpenter.sh/nodepool": vmNodePool},
			Containers: []corev1.Container{{Name: "c", Image: "anchor", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}}},
		},
	}
	if err := env.kube.Create(ctx, anchor); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := poll(wctx, func() error {
		if err := env.kube.Get(wctx, client.ObjectKeyFromObject(anchor), anchor); err != nil {
			return err
		}
		if anchor.Spec.NodeName == "" {
			return fmt.Errorf("anchor pod not bound")
		}
		var node corev1.Node
		if err := env.kube.Get(wctx, client.ObjectKey{Name: anchor.Spec.NodeName}, &node); err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", node.Name)
	})
	if err != nil {
		return fmt.Errorf("waiting for a node in %s: %w", vmNodePool, err)
	}
	env.vmNode = anchor.Spec.NodeName
	patch := []byte(fmt.Sprintf(`{"status":{"capacity":{%q:"10"},"allocatable":{%q:"10"}}}`, vmResource, vmResource))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: env.vmNode}}
	if err := env.kube.Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return fmt.Errorf("advertising %s on %s: %w", vmResource, env.vmNode, err)
	}
	// It must still be there a few heartbeats later.
	time.Sleep(3 * time.Second)
	if err := env.kube.Get(ctx, client.ObjectKey{Name: env.vmNode}, node); err != nil {
		return err
	}
	if q := node.Status.Allocatable[vmResource]; q.Value() != 10 {
		return fmt.Errorf("node %s allocatable %s = %s after the patch, want 10", env.vmNode, vmResource, q.String())
	}
	return nil
}

// poll calls check every 250ms until it returns nil or ctx ends.
func poll(ctx context.Context, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// tailLog returns the last lines of a component's log.
func tailLog(name string, lines int) string {
	f, err := os.Open(filepath.Join(env.c.LogDir(), name+".log"))
	if err != nil {
		return err.Error()
	}
	defer func() { _ = f.Close() }()
	var all []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		all = append(all, s.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// waitFor polls check every 250ms until it returns nil or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := poll(ctx, check); err != nil {
		t.Fatalf("waiting %s for %s: %v", timeout, what, err)
	}
}
