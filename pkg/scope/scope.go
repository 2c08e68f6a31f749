// Package scope keeps the label the chart's scoped pod webhook selects
// namespaces by (webhook.scope: namespaces): Marker writes it when a
// workload or PlacementPolicy opts in, or a ClusterPlacementPolicy covers
// the namespace, from the validating webhooks before
// the object is admitted; Covering writes it on the leader as soon as a
// namespace's labels bring it under a ClusterPlacementPolicy, or a
// ClusterPlacementPolicy that covers it reaches the cache (Covered); and
// Sweep writes it for what opted in before (an upgrade, a validator that
// failed open).
package scope

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// OperationLabel is the operation label of
// apportion_placement_api_errors_total for a namespace label apportion
// could not write.
const OperationLabel = "label_namespace"

// Marker labels a namespace apportion.dev/placement: enabled, the
// label the chart's scoped pod webhook selects namespaces by
// (webhook.scope: namespaces). The workload and PlacementPolicy validators
// call it for an object that opts in, before the API server stores the
// object: the workload's first pods, created after it, then reach the pod
// webhook. The label is never removed: a namespace that no longer holds
// anything opted in only costs its pods a webhook call.
type Marker struct {
	// Reader is the metadata cache of namespaces: a namespace labelled
	// already costs no API call.
	Reader client.Reader
	// Writer patches the namespace.
	Writer client.Writer
	// Excluded namespaces are never labelled, nor are namespaces labelled
	// apportion.dev/ignore: apportion leaves them alone.
	Excluded sets.Set[string]
}

// Mark labels the namespace unless it is labelled already, excluded or
// ignored. A namespace the cache does not hold yet (created a moment ago)
// is patched all the same.
func (m *Marker) Mark(ctx context.Context, namespace string) error {
	if m == nil || namespace == "" || m.Excluded.Has(namespace) {
		return nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := m.Reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err == nil {
		if _, ignored := ns.Labels[annotations.Ignore]; ignored || ns.Labels[annotations.NamespacePlacement] == annotations.NamespacePlacementEnabled {
			return nil
		}
	}
	// A merge patch of the one label: nothing else of the namespace is
	// read or written. An ignore label written since the cache's copy is
	// left as it is; the label is then only unused.
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, annotations.NamespacePlacement, annotations.NamespacePlacementEnabled)
	ns = &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	ns.Name = namespace
	if err := m.Writer.Patch(ctx, ns, client.RawPatch(types.MergePatchType, patch)); err != nil {
		metrics.APIErrorsTotal.WithLabelValues(OperationLabel).Inc()
		return fmt.Errorf("labelling namespace %s %s=%s: %w", namespace, annotations.NamespacePlacement, annotations.NamespacePlacementEnabled, err)
	}
	return nil
}

// MarkCovered labels every namespace the cluster policy covers, read from
// the metadata cache of namespaces: the pods of its workloads carry nothing
// that says so. A covered namespace without a covered workload only costs
// its pods a webhook call. It returns the first error after trying every
// namespace.
func (m *Marker) MarkCovered(ctx context.Context, src *policy.Source, p *v1alpha1.ClusterPlacementPolicy) error {
	if m == nil || src == nil {
		return nil
	}
	namespaces, err := m.covered(ctx, src, []*v1alpha1.ClusterPlacementPolicy{p})
	if err != nil {
		return err
	}
	return m.markAll(ctx, namespaces)
}

// Covering is the reconciler, keyed by namespace name, of the leader's
// watch of namespaces (CoveringPredicate) and of cluster policies
// (Covered): it labels a namespace created or relabelled into the selector
// of a cluster policy, or covered by a policy just cached, at once, so that
// its first pods reach the pod webhook, not only at the next sweep. Its
// reads come from the caches.
func (m *Marker) Covering(src *policy.Source) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		return reconcile.Result{}, m.MarkIfCovered(ctx, src, req.Name)
	})
}

// MarkIfCovered labels the namespace when some cluster policy covers it.
func (m *Marker) MarkIfCovered(ctx context.Context, src *policy.Source, namespace string) error {
	if m == nil || src == nil || m.Excluded.Has(namespace) {
		return nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := m.Reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ns.Labels[annotations.NamespacePlacement] == annotations.NamespacePlacementEnabled {
		return nil
	}
	all, err := src.ClusterPolicies(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(all, func(p *v1alpha1.ClusterPlacementPolicy) bool { return src.SelectsNamespace(p, ns) }) {
		return nil
	}
	return m.Mark(ctx, namespace)
}

// CoveringPredicate passes the namespace events that can bring a namespace
// under a cluster policy: a namespace created, or its labels changed. A
// namespace labelled already is passed over.
func CoveringPredicate() predicate.Predicate {
	unlabelled := func(o client.Object) bool {
		return o.GetLabels()[annotations.NamespacePlacement] != annotations.NamespacePlacementEnabled
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return unlabelled(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return unlabelled(e.ObjectNew) && !labels.Equals(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// Covered is the event handler of the leader's watch of cluster policies,
// for the same queue as Covering: a policy that enters the cache (created,
// or its spec changed: a new generation) queues the namespaces it covers
// that are not labelled yet, from the metadata cache of namespaces. A
// namespace created in the same apply as the policy may have had its own
// event handled before the policy was cached, when nothing covered it yet;
// the policy's event, handled once it is cached, catches it. A policy being
// deleted, or one whose status alone changed, queues nothing; a namespace
// labelled already or excluded is not queued.
func (m *Marker) Covered(src *policy.Source) handler.EventHandler {
	queue := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		p, ok := o.(*v1alpha1.ClusterPlacementPolicy)
		if m == nil || src == nil || !ok || p.DeletionTimestamp != nil {
			return
		}
		namespaces, err := m.covered(ctx, src, []*v1alpha1.ClusterPlacementPolicy{p})
		if err != nil {
			log.FromContext(ctx).Error(err, "finding the namespaces a cluster placement policy covers; retried at the next sweep", "name", p.Name)
			return
		}
		for ns := range namespaces {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: ns}})
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			queue(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				queue(ctx, e.ObjectNew, q)
			}
		},
	}
}

// covered is the set of namespaces some of policies covers, but for those
// labelled already or excluded: the ones left to label.
func (m *Marker) covered(ctx context.Context, src *policy.Source, policies []*v1alpha1.ClusterPlacementPolicy) (sets.Set[string], error) {
	out := sets.New[string]()
	if len(policies) == 0 {
		return out, nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := m.Reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	for i := range list.Items {
		ns := &list.Items[i]
		if ns.Labels[annotations.NamespacePlacement] == annotations.NamespacePlacementEnabled || m.Excluded.Has(ns.Name) {
			continue
		}
		if slices.ContainsFunc(policies, func(p *v1alpha1.ClusterPlacementPolicy) bool { return src.SelectsNamespace(p, ns) }) {
			out.Insert(ns.Name)
		}
	}
	return out, nil
}

func (m *Marker) markAll(ctx context.Context, namespaces sets.Set[string]) error {
	var first error
	for _, ns := range sets.List(namespaces) {
		if err := m.Mark(ctx, ns); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Sweep labels every namespace that holds a workload opted in by its own
// annotations (a strategy, or apportion.dev/architectures: auto) or a
// PlacementPolicy, and every namespace a ClusterPlacementPolicy covers,
// from the caches: what opted in before the scoped webhook was installed,
// while a validator failed open, or a namespace whose labels changed since.
// kinds are the workload kinds served (metadata caches); policies is false
// without their CRD, clusters nil without the cluster policies'. A strategy
// on a pod template alone needs no label: the pods carry it. It returns the
// first error after trying every namespace.
func (m *Marker) Sweep(ctx context.Context, r client.Reader, kinds []schema.GroupVersionKind, policies bool, clusters *policy.Source) error {
	namespaces := sets.New[string]()
	for _, gvk := range kinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for i := range list.Items {
			if OptedIn(list.Items[i].Annotations) {
				namespaces.Insert(list.Items[i].Namespace)
			}
		}
	}
	if policies {
		list := &v1alpha1.PlacementPolicyList{}
		if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("listing PlacementPolicies: %w", err)
		}
		for i := range list.Items {
			namespaces.Insert(list.Items[i].Namespace)
		}
	}
	all, err := clusters.ClusterPolicies(ctx)
	if err != nil {
		return err
	}
	covered, err := m.covered(ctx, clusters, all)
	if err != nil {
		return err
	}
	return m.markAll(ctx, namespaces.Union(covered))
}

// OptedIn reports whether a workload's (or its pod template's) annotations
// opt it in: a strategy under any of its names, or
// apportion.dev/architectures: auto. A strategy that does not parse counts
// too: the pods are then admitted without the gate, with a warning.
func OptedIn(annots map[string]string) bool {
	if _, _, ok := strategy.Find(annots, nil); ok {
		return true
	}
	return workload.IsArchitecturesAuto(annots[annotations.Architectures])
}
