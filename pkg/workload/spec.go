package workload

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Spec is what the status and drift controllers read from a workload beyond
// its metadata.
type Spec struct {
	// Replicas is spec.replicas (1, the API's default, when unset).
	Replicas int32
	// Annotations are the object's, Template its pod template's.
	Annotations, Template map[string]string
}

// ReadSpec reads a workload of a followed kind through r: the apps/v1 kinds
// as their typed objects (which the manager's cached client serves from an
// informer, stripped to spec.replicas and the template's annotations), any
// other kind (Argo Rollouts, which have no Go type in the scheme) as an
// unstructured object, which the manager's client reads from the API
// server. Errors are r's, unwrapped: callers test them for NotFound.
func ReadSpec(ctx context.Context, r client.Reader, gvk schema.GroupVersionKind, key client.ObjectKey) (Spec, error) {
	var obj client.Object
	switch gvk {
	case DeploymentGVK:
		obj = &appsv1.Deployment{}
	case StatefulSetGVK:
		obj = &appsv1.StatefulSet{}
	case ReplicaSetGVK:
		obj = &appsv1.ReplicaSet{}
	default:
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		obj = u
	}
	if err := r.Get(ctx, key, obj); err != nil {
		return Spec{}, err
	}
	// 1 is the API's default for spec.replicas of every kind followed.
	spec := Spec{Replicas: 1, Annotations: obj.GetAnnotations()}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		spec.Replicas, spec.Template = ptr.Deref(o.Spec.Replicas, 1), o.Spec.Template.Annotations
	case *appsv1.StatefulSet:
		spec.Replicas, spec.Template = ptr.Deref(o.Spec.Replicas, 1), o.Spec.Template.Annotations
	case *appsv1.ReplicaSet:
		spec.Replicas, spec.Template = ptr.Deref(o.Spec.Replicas, 1), o.Spec.Template.Annotations
	case *unstructured.Unstructured:
		if r, found, err := unstructured.NestedInt64(o.Object, "spec", "replicas"); err == nil && found {
			spec.Replicas = int32(r)
		}
		spec.Template, _, _ = unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "annotations")
	}
	return spec, nil
}
