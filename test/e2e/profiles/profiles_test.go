//go:build e2e

package profiles_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/profiles"
	"github.com/apportion-dev/apportion/test/framework"
)

// seed004 is seed 004's strategy: the first two pods go on-demand.
const seed004 = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// image names a registry that does not resolve: kwok pulls nothing, and
// apportion's look-up fails at once, so placement decides without
// architectures.
const image = "registry.invalid/app:1"

func newNamespace(t *testing.T) string {
	t.Helper()
	return framework.NewNamespace(t, env.Kube, framework.TestNamespaceName(t, "profiles"), nil)
}

func rl(cpu, memory string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
}

// podSpec has two containers and an init container, each with cpu and
// memory requests and limits (canonical quantities, so that what the API
// server stores reads back the same).
func podSpec(runtimeClassName string) corev1.PodSpec {
	return corev1.PodSpec{
		RuntimeClassName: ptr.To(runtimeClassName),
		InitContainers: []corev1.Container{{Name: "init", Image: image,
			Resources: corev1.ResourceRequirements{Requests: rl("200m", "32Mi"), Limits: rl("200m", "32Mi")}}},
		Containers: []corev1.Container{
			{Name: "app", Image: image, Resources: corev1.ResourceRequirements{Requests: rl("500m", "256Mi"), Limits: rl("1", "512Mi")}},
			{Name: "log", Image: image, Resources: corev1.ResourceRequirements{Requests: rl("100m", "64Mi"), Limits: rl("200m", "128Mi")}},
		},
	}
}

// deployment is a one-replica Deployment of podSpec(kata-remote) with ann
// on its metadata.
func deployment(ns, name string, ann map[string]string) *appsv1.Deployment {
	return framework.Deployment(ns, name, 1, ann, podSpec(kataRemote))
}

// waitBoundPod waits for the Deployment's one pod to be ungated and bound.
func waitBoundPod(t *testing.T, ns, name string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	framework.WaitFor(t, 90*time.Second, "the pod of "+name+" to be bound", func() error {
		var list corev1.PodList
		if err := env.Kube.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d pods", len(list.Items))
		}
		pod = list.Items[0]
		if decision.HasGate(&pod) || pod.Spec.NodeName == "" {
			return fmt.Errorf("pod %s: gated %v, node %q, conditions %v", pod.Name, decision.HasGate(&pod), pod.Spec.NodeName, pod.Status.Conditions)
		}
		return nil
	})
	return pod
}

func equalList(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// checkRewritten checks a pod of podSpec(kata-remote) as the API server
// stored it: the extended resource on the first container only, no cpu or
// memory anywhere, the removed values recorded, the RuntimeClass's overhead,
// and bound to the node that advertises the resource.
func checkRewritten(t *testing.T, pod corev1.Pod) {
	t.Helper()
	vm := corev1.ResourceList{vmResource: resource.MustParse("1")}
	if r := pod.Spec.Containers[0].Resources; !equalList(r.Requests, vm) || !equalList(r.Limits, vm) {
		t.Errorf("first container's resources = %+v, want %s: 1 as request and limit only", r, vmResource)
	}
	for _, c := range append(pod.Spec.Containers[1:], pod.Spec.InitContainers...) {
		if len(c.Resources.Requests) != 0 || len(c.Resources.Limits) != 0 {
			t.Errorf("container %s kept resources %+v", c.Name, c.Resources)
		}
	}
	if !equalList(pod.Spec.Overhead, rl("250m", "120Mi")) {
		t.Errorf("overhead = %v, want the RuntimeClass's 250m/120Mi", pod.Spec.Overhead)
	}
	raw, ok := pod.Annotations[annotations.OriginalResources]
	if !ok {
		t.Fatalf("no %s annotation: %v", annotations.OriginalResources, pod.Annotations)
	}
	rec, err := profiles.ParseRecord(raw)
	if err != nil {
		t.Fatalf("%s %q: %v", annotations.OriginalResources, raw, err)
	}
	sent := podSpec(kataRemote)
	for _, c := range sent.Containers {
		if got := rec.Containers[c.Name]; !equalList(got.Requests, c.Resources.Requests) || !equalList(got.Limits, c.Resources.Limits) {
			t.Errorf("recorded for container %s: %+v, want %+v", c.Name, got, c.Resources)
		}
	}
	for _, c := range sent.InitContainers {
		if got := rec.InitContainers[c.Name]; !equalList(got.Requests, c.Resources.Requests) || !equalList(got.Limits, c.Resources.Limits) {
			t.Errorf("recorded for init container %s: %+v, want %+v", c.Name, got, c.Resources)
		}
	}
	if pod.Spec.NodeName != env.vmNode {
		t.Errorf("bound to %s, want %s (the node advertising %s)", pod.Spec.NodeName, env.vmNode, vmResource)
	}
}

// TestPeerPodRewritten: a Deployment's pod of the profiled class, without a
// strategy, is rewritten at admission and scheduled on the node that
// advertises the extended resource.
func TestPeerPodRewritten(t *testing.T) {
	ns := newNamespace(t)
	if err := env.Kube.Create(t.Context(), deployment(ns, "peer", nil)); err != nil {
		t.Fatal(err)
	}
	pod := waitBoundPod(t, ns, "peer")
	checkRewritten(t, pod)
	if pod.Annotations[annotations.Group] != "" {
		t.Errorf("no strategy, yet a decision: %v", pod.Annotations)
	}
}

// TestPeerPodWithStrategy: with seed 004's strategy on the Deployment, the
// same pod is rewritten and gated in one admission, then placed (on-demand,
// the strategy's base) and bound to the node advertising the resource.
func TestPeerPodWithStrategy(t *testing.T) {
	ns := newNamespace(t)
	if err := env.Kube.Create(t.Context(), deployment(ns, "peer", map[string]string{annotations.LegacyStrategy: seed004})); err != nil {
		t.Fatal(err)
	}
	pod := waitBoundPod(t, ns, "peer")
	checkRewritten(t, pod)
	if !decision.Decided(&pod) {
		t.Fatalf("not placed by apportion: annotations %v", pod.Annotations)
	}
	if g, p := pod.Annotations[annotations.Group], pod.Annotations[annotations.NodePool]; g != "karpenter.sh/capacity-type=on-demand" || p != vmNodePool {
		t.Errorf("decision group %q nodepool %q, want karpenter.sh/capacity-type=on-demand in %s", g, p, vmNodePool)
	}
	if pod.Annotations[annotations.Decision] == "" {
		t.Errorf("no %s annotation", annotations.Decision)
	}
}

// TestOtherRuntimeClassUnchanged: a pod of another runtime class keeps its
// resources exactly as sent, and gets no annotation of apportion's.
func TestOtherRuntimeClassUnchanged(t *testing.T) {
	ns := newNamespace(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}, Spec: podSpec(runc)}
	// A gate of the test's own keeps it from scheduling (and Karpenter
	// from launching a node for it): only admission matters here.
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "e2e.apportion.dev/hold"}}
	sent := pod.DeepCopy()
	if err := env.Kube.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	for _, pair := range []struct {
		what      string
		got, sent []corev1.Container
	}{{"containers", got.Spec.Containers, sent.Spec.Containers}, {"initContainers", got.Spec.InitContainers, sent.Spec.InitContainers}} {
		g, _ := json.Marshal(resourcesOf(pair.got))
		s, _ := json.Marshal(resourcesOf(pair.sent))
		if string(g) != string(s) {
			t.Errorf("%s resources changed:\n got %s\nsent %s", pair.what, g, s)
		}
	}
	for k := range got.Annotations {
		if strings.HasPrefix(k, annotations.Prefix) {
			t.Errorf("annotation %s=%s on a pod of another runtime class", k, got.Annotations[k])
		}
	}
	if len(got.Spec.SchedulingGates) != 1 {
		t.Errorf("scheduling gates %v, want the test's own only", got.Spec.SchedulingGates)
	}
}

func resourcesOf(cs []corev1.Container) []corev1.ResourceRequirements {
	out := make([]corev1.ResourceRequirements, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Resources)
	}
	return out
}
