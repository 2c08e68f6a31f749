package framework

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// nsSeq numbers the namespaces TestNamespaceName names: a test run again
// (-count) gets a new namespace while the old one may still be terminating.
var nsSeq atomic.Int32

// TestNamespaceName is prefix, a number and t's name ("/" as "-",
// lowercased): a namespace name for NewNamespace.
func TestNamespaceName(t testing.TB, prefix string) string {
	return fmt.Sprintf("%s-%d-%s", prefix, nsSeq.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
}

// NewNamespace creates the namespace name (cut to 60 characters, no
// trailing "-") with labels and returns its name; Cleanup deletes it.
func NewNamespace(t testing.TB, kube client.Client, name string, labels map[string]string) string {
	t.Helper()
	if len(name) > 60 {
		name = name[:60]
	}
	name = strings.TrimRight(name, "-")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := kube.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), ns) })
	return name
}

// AppPodSpec is one container "app" of image requesting 50m cpu and 64Mi
// memory: small enough that kwok nodes hold many.
func AppPodSpec(image string) corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: image,
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
		}},
	}}}
}

// Deployment is a Deployment of replicas pods of spec labelled app=name,
// with ann on its metadata (where a strategy goes).
func Deployment(ns, name string, replicas int32, ann map[string]string, spec corev1.PodSpec) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// WaitPods waits until app=name in ns has n live pods (LivePods), every one
// satisfying ok (described by what), and returns them.
func WaitPods(t testing.TB, kube client.Client, ns, name string, n int, timeout time.Duration, what string, ok func(*corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	WaitFor(t, timeout, fmt.Sprintf("%d %s pods of %s", n, what, name), func() error {
		pods = LivePods(t, kube, ns, name)
		good := 0
		for i := range pods {
			if ok(&pods[i]) {
				good++
			}
		}
		if len(pods) != n || good != n {
			return fmt.Errorf("%d live pods, %d %s", len(pods), good, what)
		}
		return nil
	})
	return pods
}

// NodeOf gets the node the pod is bound to, or fails the test.
func NodeOf(t testing.TB, kube client.Client, p *corev1.Pod) *corev1.Node {
	t.Helper()
	var n corev1.Node
	if err := kube.Get(t.Context(), client.ObjectKey{Name: p.Spec.NodeName}, &n); err != nil {
		t.Fatalf("node of %s: %v", p.Name, err)
	}
	return &n
}

// Events returns the Events of ns that match. Events are sent
// asynchronously, so it waits up to wait for at least one before returning
// what it found (possibly nothing).
func Events(t testing.TB, kube client.Client, ns string, wait time.Duration, match func(*corev1.Event) bool) []corev1.Event {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		var list corev1.EventList
		if err := kube.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		var out []corev1.Event
		for i := range list.Items {
			if match(&list.Items[i]) {
				out = append(out, list.Items[i])
			}
		}
		if len(out) > 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Messages are the Events' messages.
func Messages(events []corev1.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Message)
	}
	return out
}
