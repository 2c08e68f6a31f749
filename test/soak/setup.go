package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	// release and namespace are the chart suite's (and the README's).
	release   = "apportion"
	namespace = "apportion-system"
	// imageTag is the workloads' image: an index for amd64 and arm64 in the
	// soak's registry, so that placement reads real platforms.
	imageTag = "soak/app:1"
)

// env is the cluster, apportion installed in it by its chart, the registry
// of the workloads' image and the watch on the workloads' pods.
type env struct {
	o        options
	dir      string
	c        *cluster.Cluster
	kube     client.Client
	cs       kubernetes.Interface
	kubelet  *framework.Kubelet
	registry *framework.Registry
	image    string
	pods     *tracker

	stopKubelet, stopWatch context.CancelFunc
	kubeletDone            chan struct{}
}

// setUp starts the cluster with the sample NodePools, the stand-in kubelet
// for the chart's pods and a registry, helm-installs the chart and waits
// for both replicas and a placement leader. The returned env is to be
// stopped also when err is not nil.
func setUp(ctx context.Context, o options) (e *env, err error) {
	e = &env{o: o}
	if e.dir, err = os.MkdirTemp("", "apportion-soak-"); err != nil {
		return e, fmt.Errorf("creating the scratch folder: %w", err)
	}
	// The components' and the replicas' logs are kept next to the results.
	if os.Getenv("E2E_LOG_DIR") == "" {
		if err := os.Setenv("E2E_LOG_DIR", o.out); err != nil {
			return e, err
		}
	}
	say("building apportion and starting the cluster (logs in %s)", framework.LogDir("soak"))
	bin, c, err := framework.StartKarpenter(ctx, e.dir, "soak")
	e.c = c
	if err != nil {
		return e, err
	}
	if err := v1alpha1.AddToScheme(scheme.Scheme); err != nil {
		return e, err
	}
	// Karpenter's kinds are in client-go's scheme already (test/framework
	// imports its API package).
	if e.kube, err = client.New(c.RESTConfig(), client.Options{Scheme: scheme.Scheme}); err != nil {
		return e, fmt.Errorf("connecting to the cluster: %w", err)
	}
	if e.cs, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		return e, fmt.Errorf("building a clientset: %w", err)
	}
	e.kubelet = framework.NewKubelet(c, bin, filepath.Join(e.dir, "pods"))
	kctx, stopKubelet := context.WithCancel(context.Background())
	e.stopKubelet, e.kubeletDone = stopKubelet, make(chan struct{})
	go func() { e.kubelet.Run(kctx); close(e.kubeletDone) }()

	if e.registry, err = framework.StartRegistry(c); err != nil {
		return e, err
	}
	if _, err := e.registry.PushIndex(ctx, imageTag, []string{"linux/amd64", "linux/arm64"}, false, framework.ImageOptions{}); err != nil {
		return e, fmt.Errorf("pushing the workloads' image: %w", err)
	}
	e.image = e.registry.Ref(imageTag)
	if err := e.install(ctx); err != nil {
		return e, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	e.stopWatch = stopWatch
	e.pods, err = watchPods(wctx, c.RESTConfig())
	return e, err
}

// install runs `helm install` of chart/ with the chart suite's values (the
// label that has the stand-in kubelet run the pods) and the registry's
// address allowed for image look-ups, then waits for both replicas and a
// fresh Lease.
func (e *env) install(ctx context.Context) error {
	start := time.Now()
	args := append([]string{"install", release, chartDir(), "-n", namespace, "--create-namespace"}, chartValues()...)
	out, err := framework.Helm(ctx, e.c, append(args, "--wait", "--timeout", "5m")...)
	if err != nil {
		return fmt.Errorf("helm install: %w\n%s\nkubelet:\n%s", err, out, framework.TailLog(e.c, "kubelet", 30))
	}
	if err := e.waitReplicas(ctx, 3*time.Minute); err != nil {
		return err
	}
	say("helm install: 2 replicas and a placement leader after %s", time.Since(start).Round(time.Second))
	return nil
}

// chartValues are the values of every install and upgrade.
func chartValues() []string {
	return []string{"-f", filepath.Join(framework.RepoRoot(), "test", "e2e", "chart", "testdata", "values.yaml"),
		"--set-json", `settings.imageRegistries.allow=["127.0.0.1"]`}
}

func chartDir() string { return filepath.Join(framework.RepoRoot(), "chart") }

// waitReplicas waits until two replicas run and are Ready, no other pod of
// the chart is left (none terminating), none of them is one of the pods
// named gone, and the placement Lease is fresh and held by neither of
// those.
func (e *env) waitReplicas(ctx context.Context, timeout time.Duration, gone ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ready, why := e.replicasReady(ctx, gone)
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for 2 Ready replicas and a placement leader (%s): %w", why, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (e *env) replicasReady(ctx context.Context, gone []string) (bool, string) {
	key := client.ObjectKey{Namespace: namespace, Name: release}
	procs := e.kubelet.Processes()
	var pods corev1.PodList
	if err := e.kube.List(ctx, &pods, client.InNamespace(namespace), client.HasLabels{framework.ProcessLabel}); err != nil {
		return false, err.Error()
	}
	ready := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || slices.Contains(gone, p.Name) {
			return false, "pod " + p.Name + " still there"
		}
		if _, running := procs[p.Name]; running && podReady(p) {
			ready++
		}
	}
	if ready != 2 || len(pods.Items) != 2 {
		return false, fmt.Sprintf("%d pods, %d Ready", len(pods.Items), ready)
	}
	var lease coordinationv1.Lease
	if err := e.kube.Get(ctx, key, &lease); err != nil || !framework.LeaseAlive(ctx, e.kube, key) {
		return false, "no fresh Lease"
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	for _, g := range gone {
		if strings.HasPrefix(holder, g) {
			return false, "the Lease is still " + g + "'s"
		}
	}
	return true, ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stop stops the watch, the kubelet's processes, the registry and the
// cluster (printing the components' log tails when failed) and removes the
// scratch folder.
func (e *env) stop(failed bool) {
	if e.stopWatch != nil {
		e.stopWatch()
	}
	if e.stopKubelet != nil {
		e.stopKubelet()
		<-e.kubeletDone
	}
	if e.registry != nil {
		e.registry.Close()
	}
	code := 0
	if failed {
		code = 1
	}
	framework.StopCluster(e.c, code, 40)
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// apiserverMetrics reads the API server's own /metrics.
func (e *env) apiserverMetrics(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return string(b), nil
}

// helm runs the cluster's helm; a failure carries its output.
func (e *env) helm(ctx context.Context, args ...string) error {
	out, err := framework.Helm(ctx, e.c, args...)
	if err != nil {
		return errors.New(strings.TrimSpace(fmt.Sprintf("helm %s: %v\n%s", args[0], err, out)))
	}
	return nil
}
