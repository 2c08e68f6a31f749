//go:build e2e

// Package arch_test runs `apportion webhook` against a real control plane
// with Karpenter's kwok provider (test/cluster) and an OCI registry served
// by the test inside the cluster's network namespace
// (framework.StartRegistry), and checks architecture-aware placement end to
// end: pods land only on architectures their images support, strategy groups
// that cannot provide one are left out with an Event, architecture-only
// namespaces, private images through imagePullSecrets and ServiceAccounts,
// and the fail-open path when the registry stops answering.
//
// kwok plays kubelet, so images are never pulled: the registry is read by
// apportion alone, and its request counts are apportion's look-ups.
package arch_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	// gateTimeout is the replicas' --gate-timeout: the bound within which a
	// pod whose registry is down must still be placed, by the controller.
	gateTimeout = 45 * time.Second
	// imageTimeout is the replicas' --image-timeout.
	imageTimeout = 3 * time.Second
	// replicas is the number of `apportion webhook` processes: two, so that
	// admission (gating) happens on the follower too.
	replicas = 2
)

var env struct {
	c        *cluster.Cluster
	kube     client.Client
	bin      string
	certDir  string
	lb       *framework.Balancer
	replicas []*framework.Replica
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
			for _, r := range env.replicas {
				fmt.Fprintf(os.Stderr, "--- %s log tail\n%s\n", r.Name, tailLog(r.Name, 60))
			}
			env.c.DumpLogs(os.Stderr, 40)
		}
		if err := env.c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping cluster: %v\n", err)
		}
	}
	fmt.Fprintf(os.Stderr, "arch e2e: wall time %s\n", time.Since(start).Round(time.Second))
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp("", "apportion-e2e-arch-")
	if err != nil {
		return 1, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if env.bin, err = framework.BuildApportion(ctx, tmp, os.Stderr); err != nil {
		return 1, err
	}
	// E2E_LOG_DIR keeps every component's and replica's log after the run.
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
	// The replicas stop before their certificate folder goes.
	defer func() {
		for _, r := range env.replicas {
			r.Stop()
		}
	}()
	if err := startReplicas(ctx); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// startReplicas starts the replicas every test shares, behind the balancer,
// and waits for them to serve and for a leader.
func startReplicas(ctx context.Context) error {
	args := supportedFlags(ctx, "--image-timeout="+imageTimeout.String())
	ports := make([]int, 0, replicas)
	for i := range replicas {
		r, err := framework.StartReplica(env.c, env.bin, env.certDir, fmt.Sprintf("apportion-%d", i+1), gateTimeout, args...)
		if err != nil {
			return err
		}
		env.replicas = append(env.replicas, r)
		ports = append(ports, r.Port)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, r := range env.replicas {
		if err := r.WaitReady(wctx); err != nil {
			return fmt.Errorf("%w: %s", err, tailLog(r.Name, 20))
		}
	}
	env.lb.Set(ports...)
	for !framework.LeaderAlive(wctx, env.kube) {
		select {
		case <-wctx.Done():
			return fmt.Errorf("no placement leader: %w", wctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// supportedFlags keeps the flags `apportion webhook --help` knows, so the
// harness runs against a binary that predates them (the cases that need the
// feature then fail on their assertions, not on a replica that will not
// start).
func supportedFlags(ctx context.Context, flags ...string) []string {
	help, _ := exec.CommandContext(ctx, env.bin, "webhook", "--help").CombinedOutput()
	var out []string
	for _, f := range flags {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if strings.Contains(string(help), "-"+name+" ") {
			out = append(out, f)
		} else {
			fmt.Fprintf(os.Stderr, "arch e2e: apportion webhook has no --%s: not passing %s\n", name, f)
		}
	}
	return out
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
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("waiting %s for %s: %v", timeout, what, err)
}
