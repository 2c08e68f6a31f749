package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// SystemNamespaces are never covered by a ClusterPlacementPolicy, whatever
// their labels: Kubernetes' own.
var SystemNamespaces = []string{metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease}

// ClusterStrategy is the cluster policy's strategy in canonical string
// syntax, as Strategy gives a PlacementPolicy's.
func ClusterStrategy(spec *v1alpha1.ClusterPlacementPolicySpec) (string, error) {
	st := spec.Strategy
	return Strategy(&v1alpha1.PlacementPolicySpec{Strategy: &st})
}

// Ranked orders cluster policies as they win: the highest priority first,
// then the oldest, then by name.
func Ranked(a, b *v1alpha1.ClusterPlacementPolicy) int {
	if c := cmp.Compare(b.Spec.Priority, a.Spec.Priority); c != 0 {
		return c
	}
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// compiledCluster is what a cluster policy's matching needs, parsed once per
// generation.
type compiledCluster struct {
	generation int64
	raw        string
	invalid    string          // the fault of an invalid strategy
	namespaces labels.Selector // nil: the selector does not parse, nothing matches
	workloads  labels.Selector // nil: every workload
	badTarget  bool
}

func compileCluster(p *v1alpha1.ClusterPlacementPolicy) compiledCluster {
	c := compiledCluster{generation: p.Generation}
	var err error
	if c.raw, err = ClusterStrategy(&p.Spec); err != nil {
		c.invalid = err.Error()
	}
	if sel, err := metav1.LabelSelectorAsSelector(&p.Spec.NamespaceSelector); err == nil {
		c.namespaces = sel
	}
	if p.Spec.Target.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Target.Selector)
		if err != nil {
			c.badTarget = true
		} else if !sel.Empty() {
			c.workloads = sel
		}
	}
	return c
}

// Excludes reports whether a namespace is out of every cluster policy's
// reach: excluded (apportion's own among them), a system namespace, or
// labelled apportion.dev/ignore.
func (s *Source) Excludes(ns *metav1.PartialObjectMetadata) bool {
	if s.excluded.Has(ns.Name) || slices.Contains(SystemNamespaces, ns.Name) {
		return true
	}
	_, ignored := ns.Labels[annotations.Ignore]
	return ignored
}

// SelectsNamespace reports whether the cluster policy covers the namespace
// (its metadata: name and labels).
func (s *Source) SelectsNamespace(p *v1alpha1.ClusterPlacementPolicy, ns *metav1.PartialObjectMetadata) bool {
	if s.Excludes(ns) {
		return false
	}
	c := s.compiled(p)
	return c.namespaces != nil && c.namespaces.Matches(labels.Set(ns.Labels))
}

// Covers reports whether the cluster policy covers the workload top (its
// GroupVersionKind and labels must be set) of namespace ns.
func (s *Source) Covers(p *v1alpha1.ClusterPlacementPolicy, ns, top *metav1.PartialObjectMetadata) bool {
	if !s.SelectsNamespace(p, ns) {
		return false
	}
	gvk := top.GroupVersionKind()
	if len(p.Spec.Target.Kinds) > 0 && !slices.Contains(p.Spec.Target.Kinds, gvk.Kind) {
		return false
	}
	c := s.compiled(p)
	if c.badTarget {
		return false
	}
	return c.workloads == nil || c.workloads.Matches(labels.Set(top.Labels))
}

func (s *Source) compiled(p *v1alpha1.ClusterPlacementPolicy) compiledCluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.clusters[p.UID]; ok && e.generation == p.Generation && p.UID != "" {
		return e
	}
	c := compileCluster(p)
	if len(s.clusters) >= maxParsed {
		s.clusters = map[types.UID]compiledCluster{}
	}
	s.clusters[p.UID] = c
	return c
}

// ClusterPolicies returns every ClusterPlacementPolicy not being deleted, as
// the cache holds them (callers must not modify them), in no order; nil
// when the source does not read them.
func (s *Source) ClusterPolicies(ctx context.Context) ([]*v1alpha1.ClusterPlacementPolicy, error) {
	if s == nil || !s.withClusters {
		return nil, nil
	}
	var list v1alpha1.ClusterPlacementPolicyList
	if err := s.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing cluster placement policies: %w", err)
	}
	out := make([]*v1alpha1.ClusterPlacementPolicy, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// Namespace reads a namespace's metadata from the cache; a namespace not
// cached yet is workload.ErrNotCached.
func (s *Source) Namespace(ctx context.Context, name string) (*metav1.PartialObjectMetadata, error) {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := s.reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: namespace %s", workload.ErrNotCached, name)
		}
		return nil, fmt.Errorf("getting namespace %s: %w", name, err)
	}
	return ns, nil
}

// Covering returns the cluster policies that cover the workload top of
// namespace, highest ranked first. The namespace comes from the cache:
// when there are cluster policies and it is not cached yet, the error is
// workload.ErrNotCached.
func (s *Source) Covering(ctx context.Context, namespace string, top *metav1.PartialObjectMetadata) ([]*v1alpha1.ClusterPlacementPolicy, error) {
	all, err := s.ClusterPolicies(ctx)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	if s.excluded.Has(namespace) || slices.Contains(SystemNamespaces, namespace) {
		return nil, nil
	}
	ns, err := s.Namespace(ctx, namespace)
	if err != nil {
		return nil, err
	}
	var out []*v1alpha1.ClusterPlacementPolicy
	for _, p := range all {
		if s.Covers(p, ns, top) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, Ranked)
	return out, nil
}

// Tied reports whether the first two of ranked (Covering's order) have the
// same priority: the first wins by age or name, which is reported.
func Tied(ranked []*v1alpha1.ClusterPlacementPolicy) bool {
	return len(ranked) > 1 && ranked[0].Spec.Priority == ranked[1].Spec.Priority
}

// SkipMayBeRefused reports whether some cluster policy does not let its
// workloads opt out with apportion.dev/skip. The pod webhook asks it for an
// opted-out pod whose workload it cannot resolve yet.
func (s *Source) SkipMayBeRefused(ctx context.Context) bool {
	all, err := s.ClusterPolicies(ctx)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(all, func(p *v1alpha1.ClusterPlacementPolicy) bool { return !p.SkipAllowed() })
}

// clusterPolicies are the cluster policies covering top, highest ranked
// first, as workload policies.
func (s *Source) clusterPolicies(ctx context.Context, namespace string, top *metav1.PartialObjectMetadata) ([]workload.Policy, error) {
	if !s.withClusters {
		return nil, nil
	}
	ranked, err := s.Covering(ctx, namespace, top)
	if err != nil {
		if errors.Is(err, workload.ErrNotCached) {
			return nil, err
		}
		log.FromContext(ctx).Error(err, "reading cluster placement policies, placing without them", "namespace", namespace, "workload", top.Name)
		return nil, nil
	}
	out := make([]workload.Policy, len(ranked))
	for i, p := range ranked {
		c := s.compiled(p)
		out[i] = workload.Policy{Strategy: c.raw, Invalid: c.invalid, Mode: string(p.Spec.Mode), Name: p.Name, Cluster: true,
			NoSkip: !p.SkipAllowed(), Priority: p.Spec.Priority}
	}
	return out, nil
}
