package workload

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/apportion-dev/apportion/pkg/test"
)

// TestReadSpec: spec.replicas and the pod template's annotations of a typed
// Deployment and of an unstructured Rollout; 1 when replicas is unset.
func TestReadSpec(t *testing.T) {
	deploy := test.Deployment(metav1.ObjectMeta{Namespace: "web", Name: "nginx", Annotations: map[string]string{"a": "1"}})
	deploy.Spec.Replicas = ptr.To[int32](7)
	deploy.Spec.Template.Annotations = map[string]string{"t": "2"}
	unset := test.Deployment(metav1.ObjectMeta{Namespace: "web", Name: "unset"})
	unset.Spec.Replicas = nil
	rollout := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "web", "name": "canary"},
		"spec": map[string]any{"replicas": int64(5),
			"template": map[string]any{"metadata": map[string]any{"annotations": map[string]any{"t": "3"}}}},
	}}
	rollout.SetGroupVersionKind(RolloutGVK)
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(deploy, unset, rollout).Build()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		spec     func() (Spec, error)
		replicas int32
		template string
	}{
		{"deployment", func() (Spec, error) {
			return ReadSpec(ctx, c, DeploymentGVK, client.ObjectKey{Namespace: "web", Name: "nginx"})
		}, 7, "2"},
		{"replicas unset", func() (Spec, error) {
			return ReadSpec(ctx, c, DeploymentGVK, client.ObjectKey{Namespace: "web", Name: "unset"})
		}, 1, ""},
		{"rollout", func() (Spec, error) {
			return ReadSpec(ctx, c, RolloutGVK, client.ObjectKey{Namespace: "web", Name: "canary"})
		}, 5, "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.spec()
			if err != nil {
				t.Fatal(err)
			}
			if s.Replicas != tc.replicas || s.Template["t"] != tc.template {
				t.Errorf("spec %+v, want %d replicas and template annotation %q", s, tc.replicas, tc.template)
			}
		})
	}
	if _, err := ReadSpec(ctx, c, DeploymentGVK, client.ObjectKey{Namespace: "web", Name: "gone"}); err == nil {
		t.Error("a missing workload: no error")
	}
}
