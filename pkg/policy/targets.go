package policy

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Targets are the workloads of kinds (the followed ones) that the
// PlacementPolicy p targets, their metadata from the caches. A ReplicaSet
// that a Deployment or Rollout controls is no workload of its own:
// placement follows it up to its owner.
func (x *Observer) Targets(ctx context.Context, p *v1alpha1.PlacementPolicy, kinds []schema.GroupVersionKind) ([]*metav1.PartialObjectMetadata, error) {
	t := p.Spec.Target
	var out []*metav1.PartialObjectMetadata
	for _, gvk := range kinds {
		if t.Kind != "" && gvk.Kind != t.Kind {
			continue
		}
		if t.Selector == nil {
			obj := metadataOf(gvk)
			if err := x.reader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: t.Name}, obj); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("getting %s %s/%s: %w", gvk.Kind, p.Namespace, t.Name, err)
			}
			obj.SetGroupVersionKind(gvk)
			if Targets(p, obj) {
				out = append(out, obj)
			}
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(t.Selector)
		if err != nil || sel.Empty() {
			return nil, nil // the webhook refuses these; nothing to target
		}
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := x.reader.List(ctx, list, client.InNamespace(p.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, fmt.Errorf("listing %s in %s: %w", gvk.Kind, p.Namespace, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			obj.SetGroupVersionKind(gvk)
			if ownWorkload(obj) && Targets(p, obj) {
				out = append(out, obj)
			}
		}
	}
	return out, nil
}

// Covered calls fn with each workload of kinds (the followed ones) that the
// cluster policy p covers, and its namespace, namespace by namespace, from
// the metadata caches, and returns how many namespaces p covers.
func (x *Observer) Covered(ctx context.Context, p *v1alpha1.ClusterPlacementPolicy, kinds []schema.GroupVersionKind,
	fn func(ns, top *metav1.PartialObjectMetadata) error) (namespaces int32, err error) {
	nsList := &metav1.PartialObjectMetadataList{}
	nsList.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := x.reader.List(ctx, nsList, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing namespaces: %w", err)
	}
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		if !x.source.SelectsNamespace(p, ns) {
			continue
		}
		namespaces++
		for _, gvk := range kinds {
			if len(p.Spec.Target.Kinds) > 0 && !slices.Contains(p.Spec.Target.Kinds, gvk.Kind) {
				continue
			}
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err := x.reader.List(ctx, list, client.InNamespace(ns.Name), client.UnsafeDisableDeepCopy); err != nil {
				return namespaces, fmt.Errorf("listing %s in %s: %w", gvk.Kind, ns.Name, err)
			}
			for j := range list.Items {
				// The cache's object: copied before its kind is set.
				top := list.Items[j].DeepCopy()
				top.SetGroupVersionKind(gvk)
				if !ownWorkload(top) || !x.source.Covers(p, ns, top) {
					continue
				}
				if err := fn(ns, top); err != nil {
					return namespaces, err
				}
			}
		}
	}
	return namespaces, nil
}

// ownWorkload is false for a ReplicaSet a Deployment or Rollout controls.
func ownWorkload(obj *metav1.PartialObjectMetadata) bool {
	return obj.GroupVersionKind() != workload.ReplicaSetGVK || metav1.GetControllerOfNoCopy(obj) == nil
}
