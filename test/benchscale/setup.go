package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

// controlPlaneQPS is the client rate of kube-controller-manager and
// kube-scheduler. Their defaults (20 and 50 requests per second) would make
// the ReplicaSet controller's pod creations and the scheduler's bindings the
// whole measure: 10,000 pods take 500 s to create at 20 per second, with or
// without apportion. Karpenter's client already allows 200.
const controlPlaneQPS = "200"

// bench is the cluster with apportion running in it, and the watch on the
// bench's pods.
type bench struct {
	o         options
	dir       string
	c         *cluster.Cluster
	kube      client.Client
	lb        *framework.Balancer
	replicas  []*replica
	watch     *podWatch
	stopWatch context.CancelFunc
	registry  *framework.Registry
	// image is the workloads' image: an index for amd64 and arm64 in the
	// registry, so that the architecture split inspects a real image
	// (once: apportion caches it) instead of timing out on the Internet.
	image string
}

// imageTag is the workloads' image in the bench's registry.
const imageTag = "bench/app:1"

// replica is an `apportion webhook` process and its pprof port.
type replica struct {
	*framework.Replica
	pprofPort int
}

// imageArchitectures are the architectures of the workloads' image: an
// index of one linux image each.
var imageArchitectures = []string{"amd64", "arm64"}

// setUp builds apportion, starts the cluster with the sample NodePools,
// registers the webhooks behind a balancer and starts the replicas. The
// returned bench is to be stopped also when err is not nil.
func setUp(ctx context.Context, o options) (b *bench, err error) {
	b = &bench{o: o}
	if b.dir, err = os.MkdirTemp("", "apportion-benchscale-"); err != nil {
		return b, fmt.Errorf("creating the scratch folder: %w", err)
	}
	bin, err := framework.BuildApportion(ctx, b.dir, os.Stderr)
	if err != nil {
		return b, err
	}
	say("starting the cluster")
	b.c, err = cluster.Start(ctx, cluster.Options{
		Karpenter: true, Progress: os.Stderr, LogDir: framework.LogDir("benchscale"),
		ControllerManagerFlags: []string{"--kube-api-qps=" + controlPlaneQPS, "--kube-api-burst=" + controlPlaneQPS},
		SchedulerFlags:         []string{"--kube-api-qps=" + controlPlaneQPS, "--kube-api-burst=" + controlPlaneQPS},
	})
	if err != nil {
		return b, err
	}
	b.kube = b.c.Client()
	if b.registry, err = framework.StartRegistry(b.c); err != nil {
		return b, err
	}
	platforms := make([]string, len(imageArchitectures))
	for i, arch := range imageArchitectures {
		platforms[i] = "linux/" + arch
	}
	if _, err := b.registry.PushIndex(ctx, imageTag, platforms, false, framework.ImageOptions{}); err != nil {
		return b, fmt.Errorf("pushing the workloads' image: %w", err)
	}
	b.image = b.registry.Ref(imageTag)
	if err := framework.Apply(ctx, b.kube, filepath.Join(framework.RepoRoot(), "test", "testdata", "karpenter")); err != nil {
		return b, err
	}
	if err := raisePoolLimits(ctx, b.kube); err != nil {
		return b, err
	}
	if err := framework.WaitNodePoolsReady(ctx, b.kube); err != nil {
		return b, err
	}
	// The watch ends before the cluster stops: an open watch holds the
	// API server's shutdown up.
	watchCtx, stopWatch := context.WithCancel(ctx)
	b.stopWatch = stopWatch
	if b.watch, err = watchPods(watchCtx, b.c.RESTConfig()); err != nil {
		return b, err
	}
	return b, b.startApportion(ctx, bin)
}

// raisePoolLimits lifts the sample NodePools' limits (40 nodes, 256 CPU
// each, sized for the e2e suites) so that 10,000 pods fit in the pools
// Karpenter picks first: a pool at its limits makes Karpenter fall through
// and apportion's capacity fallback react, which is another benchmark.
func raisePoolLimits(ctx context.Context, kube client.Client) error {
	var pools karpv1.NodePoolList
	if err := kube.List(ctx, &pools); err != nil {
		return fmt.Errorf("listing NodePools: %w", err)
	}
	for i := range pools.Items {
		np := &pools.Items[i]
		patch := client.MergeFrom(np.DeepCopy())
		np.Spec.Limits = karpv1.Limits{
			corev1.ResourceCPU: resource.MustParse("4096"), corev1.ResourceMemory: resource.MustParse("16Ti"),
			"nodes": resource.MustParse("400"),
		}
		if err := kube.Patch(ctx, np, patch); err != nil {
			return fmt.Errorf("raising the limits of NodePool %s: %w", np.Name, err)
		}
	}
	return nil
}

// startApportion registers the webhooks behind a balancer, starts the
// replicas, each with pprof on a port of its own, and waits for them to
// serve and for a leader.
func (b *bench) startApportion(ctx context.Context, bin string) error {
	if err := b.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: framework.SystemNamespace}}); err != nil {
		return fmt.Errorf("creating the system namespace: %w", err)
	}
	certDir := filepath.Join(b.dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("creating the certificate folder: %w", err)
	}
	if _, _, err := b.c.IssueServingCert(certDir); err != nil {
		return err
	}
	var err error
	if b.lb, err = framework.NewBalancer(b.c); err != nil {
		return err
	}
	if err := framework.Register(ctx, b.kube, b.c.CABundle(), b.lb.Port); err != nil {
		return err
	}
	ports := make([]int, 0, b.o.apportion)
	for i := range b.o.apportion {
		free, err := b.c.FreePorts(1)
		if err != nil {
			return err
		}
		args := append([]string{"--profiling-bind-address=127.0.0.1:" + strconv.Itoa(free[0])}, b.o.extraArgs()...)
		r, err := framework.StartReplica(b.c, bin, certDir, fmt.Sprintf("apportion-%d", i+1), b.o.gateTimeout, args...)
		if err != nil {
			return err
		}
		b.replicas = append(b.replicas, &replica{Replica: r, pprofPort: free[0]})
		ports = append(ports, r.Port)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, r := range b.replicas {
		if err := r.WaitReady(wctx); err != nil {
			return fmt.Errorf("%w: %s", err, framework.TailLog(b.c, r.Name, 20))
		}
	}
	b.lb.Set(ports...)
	for !framework.LeaderAlive(wctx, b.kube) {
		select {
		case <-wctx.Done():
			return fmt.Errorf("waiting for a placement leader: %w", wctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// stop stops the replicas, the balancer and the cluster (printing the
// components' log tails when failed) and removes the scratch folder.
func (b *bench) stop(failed bool) {
	if b.stopWatch != nil {
		b.stopWatch()
	}
	for _, r := range b.replicas {
		if failed {
			fmt.Fprintf(os.Stderr, "--- %s log tail\n%s\n", r.Name, framework.TailLog(b.c, r.Name, 40))
		}
		r.Stop()
	}
	if b.lb != nil {
		b.lb.Close()
	}
	if b.registry != nil {
		b.registry.Close()
	}
	code := 0
	if failed {
		code = 1
	}
	framework.StopCluster(b.c, code, 40)
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// leader is the replica that reports holding the placement Lease, or nil.
func (b *bench) leader() *replica {
	for _, r := range b.replicas {
		if r.IsLeader() {
			return r
		}
	}
	return nil
}
