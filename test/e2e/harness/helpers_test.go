//go:build e2e

package harness_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

// env is one test's cluster with the sample NodePools applied.
type env struct {
	c    *cluster.Cluster
	kube client.Client
}

// start gives t a fresh cluster with Karpenter, the sample KWOKNodeClass
// and NodePools of test/testdata/karpenter (Ready), and a namespace "e2e".
func start(t *testing.T) env {
	t.Helper()
	c := cluster.StartForTest(t, cluster.Options{Karpenter: true})
	e := env{c: c, kube: c.Client()}
	if err := framework.Apply(t.Context(), e.kube, filepath.Join(framework.RepoRoot(), "test", "testdata", "karpenter")); err != nil {
		t.Fatalf("applying the sample NodePools: %v", err)
	}
	e.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e"}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := framework.WaitNodePoolsReady(ctx, e.kube); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e env) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := e.kube.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// podSpec is a small pod; kwok never runs the image, so its pull and
// architectures do not matter here.
func podSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi"),
		}},
	}}}
}

func deployment(name string, replicas int32, spec corev1.PodSpec) *appsv1.Deployment {
	return framework.Deployment("e2e", name, replicas, nil, spec)
}

// pods lists the pods of app=name in namespace e2e.
func (e env) pods(t *testing.T, name string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := e.kube.List(t.Context(), &list, client.InNamespace("e2e"), client.MatchingLabels{"app": name}); err != nil {
		t.Fatalf("listing pods of %s: %v", name, err)
	}
	return list.Items
}

// waitRunning waits until app=name has n pods, all Running, and returns them.
// observe, if given, sees every listing on the way.
func (e env) waitRunning(t *testing.T, name string, n int, timeout time.Duration, observe ...func([]corev1.Pod)) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, timeout, fmt.Sprintf("%d Running pods of %s", n, name), func() error {
		pods = e.pods(t, name)
		for _, o := range observe {
			o(pods)
		}
		if running := countPhase(pods, corev1.PodRunning); len(pods) != n || running != n {
			return fmt.Errorf("%d pods, %d Running", len(pods), running)
		}
		return nil
	})
	return pods
}

func countPhase(pods []corev1.Pod, phase corev1.PodPhase) int {
	n := 0
	for _, p := range pods {
		if p.Status.Phase == phase {
			n++
		}
	}
	return n
}

func (e env) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	var n corev1.Node
	if err := e.kube.Get(t.Context(), client.ObjectKey{Name: name}, &n); err != nil {
		t.Fatalf("getting node %s: %v", name, err)
	}
	return &n
}

func (e env) nodeClaims(t *testing.T) []karpv1.NodeClaim {
	t.Helper()
	var list karpv1.NodeClaimList
	if err := e.kube.List(t.Context(), &list); err != nil {
		t.Fatalf("listing NodeClaims: %v", err)
	}
	return list.Items
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitFor polls check every 250 ms until it returns nil; after timeout the
// test fails with the last error. The timeout bounds a wait, it does not
// judge speed.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting %s for %s: %v", timeout, what, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
