package framework

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Create creates obj or fails the test, naming its kind and name.
func Create(t testing.TB, kube client.Client, obj client.Object) {
	t.Helper()
	if err := kube.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// UpdateDeployment applies change to the current Deployment key, retrying
// for 30 s on conflicts with the controllers that write it too; what names
// the change in a failure.
func UpdateDeployment(t testing.TB, kube client.Client, key client.ObjectKey, what string, change func(*appsv1.Deployment)) {
	t.Helper()
	WaitFor(t, 30*time.Second, what+" "+key.Name, func() error {
		var cur appsv1.Deployment
		if err := kube.Get(t.Context(), key, &cur); err != nil {
			return err
		}
		change(&cur)
		return kube.Update(t.Context(), &cur)
	})
}

// Scale sets the Deployment's replicas (UpdateDeployment).
func Scale(t testing.TB, kube client.Client, key client.ObjectKey, replicas int32) {
	t.Helper()
	UpdateDeployment(t, kube, key, "scaling", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(replicas) })
}

// LivePods are the pods of ns labelled app=name that are neither
// terminating nor finished.
func LivePods(t testing.TB, kube client.Client, ns, name string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := kube.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}
