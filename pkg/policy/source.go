package policy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// IndexTarget indexes PlacementPolicies by what they target: "Kind/name" for
// a reference, SelectorTarget for a label selector. Register it with
// IndexPolicies before the cache starts.
const IndexTarget = "apportion.policyTarget"

// SelectorTarget is the IndexTarget value of every policy with a selector:
// those are few and matched one by one against the workload's labels.
const SelectorTarget = "*selector"

// TargetIndex is the IndexTarget function.
func TargetIndex(o client.Object) []string {
	p, ok := o.(*v1alpha1.PlacementPolicy)
	if !ok {
		return nil
	}
	if p.Spec.Target.Selector != nil {
		return []string{SelectorTarget}
	}
	if p.Spec.Target.Name == "" {
		return nil
	}
	return []string{p.Spec.Target.Kind + "/" + p.Spec.Target.Name}
}

// IndexPolicies registers IndexTarget on the manager's field indexer.
func IndexPolicies(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &v1alpha1.PlacementPolicy{}, IndexTarget, TargetIndex)
}

// Targets reports whether the policy targets the workload top (its
// GroupVersionKind, name and labels must be set).
func Targets(p *v1alpha1.PlacementPolicy, top *metav1.PartialObjectMetadata) bool {
	t := p.Spec.Target
	gvk := top.GroupVersionKind()
	if t.Kind != "" && t.Kind != gvk.Kind {
		return false
	}
	if t.APIVersion != "" {
		gv, err := schema.ParseGroupVersion(t.APIVersion)
		if err != nil || gv.Group != gvk.Group {
			return false
		}
	}
	if t.Selector == nil {
		return t.Name != "" && t.Name == top.Name
	}
	sel, err := metav1.LabelSelectorAsSelector(t.Selector)
	if err != nil {
		return false
	}
	return !sel.Empty() && sel.Matches(labels.Set(top.Labels))
}

// Older orders policies oldest first: by creation time, then by name. The
// first of a workload's policies is the one that places it.
func Older(a, b *v1alpha1.PlacementPolicy) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// Source finds the PlacementPolicies of a workload in the manager's cache; it
// implements workload.PolicySource. Each call reads two index entries of the
// policy's namespace (policies naming the workload, policies with a
// selector) and parses no strategy it has seen at the same generation. With
// WithClusterPolicies, a workload no PlacementPolicy targets is matched
// against every ClusterPlacementPolicy (few) and its namespace's labels,
// from the caches too.
type Source struct {
	reader client.Reader

	withClusters bool
	excluded     sets.Set[string]

	mu       sync.Mutex
	parsed   map[types.UID]parsedStrategy
	clusters map[types.UID]compiledCluster
}

type parsedStrategy struct {
	generation int64
	raw        string
	invalid    string // the fault of an invalid strategy
}

// maxParsed bounds the strategies kept; past it the map starts again.
const maxParsed = 4096

var _ workload.PolicySource = (*Source)(nil)

// NewSource reads policies through reader (the manager's cached client, with
// IndexPolicies registered).
func NewSource(reader client.Reader) *Source {
	return &Source{reader: reader, parsed: map[types.UID]parsedStrategy{}, clusters: map[types.UID]compiledCluster{}}
}

// WithClusterPolicies makes the source read ClusterPlacementPolicies too
// (their informer, and the metadata informer of namespaces, must run).
// excluded are the namespaces no cluster policy covers, besides
// SystemNamespaces and those labelled apportion.dev/ignore.
func (s *Source) WithClusterPolicies(excluded []string) *Source {
	s.withClusters = true
	s.excluded = sets.New(excluded...)
	return s
}

// OrNil is s as the interface workload.Resolve takes: nil (not an interface
// holding a nil *Source) when there is no Source, which is how readers tell
// that PlacementPolicies are not served.
func (s *Source) OrNil() workload.PolicySource {
	if s == nil {
		return nil
	}
	return s
}

// Policies returns the policies of namespace that target top, oldest first;
// policies being deleted are left out. The policies are the cache's own
// objects: callers must not modify them.
func (s *Source) Policies(ctx context.Context, namespace string, top *metav1.PartialObjectMetadata) ([]*v1alpha1.PlacementPolicy, error) {
	var out []*v1alpha1.PlacementPolicy
	for _, key := range []string{top.GroupVersionKind().Kind + "/" + top.Name, SelectorTarget} {
		var list v1alpha1.PlacementPolicyList
		if err := s.reader.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{IndexTarget: key}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing placement policies: %w", err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.DeletionTimestamp == nil && Targets(p, top) {
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, Older)
	return out, nil
}

// Candidates implements workload.PolicySource: the oldest PlacementPolicy
// targeting top, then the ClusterPlacementPolicies covering it, highest
// ranked first, each with its strategy (canonical when valid, as written
// and with its fault when not) and its spec.mode as written ("" when
// unset: the default mode applies).
func (s *Source) Candidates(ctx context.Context, namespace string, top *metav1.PartialObjectMetadata) ([]workload.Policy, error) {
	if s == nil {
		// No PlacementPolicy CRD: a nil *Source in a PolicySource field
		// places by annotations alone.
		return nil, nil
	}
	var out []workload.Policy
	policies, err := s.Policies(ctx, namespace, top)
	if err != nil {
		log.FromContext(ctx).Error(err, "reading placement policies, placing without them", "namespace", namespace, "workload", top.Name)
		// A namespaced policy may target the workload: no cluster
		// policy takes its place.
		return nil, nil
	}
	if len(policies) > 0 {
		p := policies[0]
		e := s.strategy(p)
		out = append(out, workload.Policy{Strategy: e.raw, Invalid: e.invalid, Mode: string(p.Spec.Mode), Name: p.Namespace + "/" + p.Name})
	}
	clusters, err := s.clusterPolicies(ctx, namespace, top)
	if err != nil && len(out) == 0 {
		return nil, err
	}
	return append(out, clusters...), nil
}

func (s *Source) strategy(p *v1alpha1.PlacementPolicy) parsedStrategy {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.parsed[p.UID]; ok && e.generation == p.Generation && p.UID != "" {
		return e
	}
	e := parsedStrategy{generation: p.Generation}
	var err error
	if e.raw, err = Strategy(&p.Spec); err != nil {
		e.invalid = err.Error()
	}
	if len(s.parsed) >= maxParsed {
		s.parsed = map[types.UID]parsedStrategy{}
	}
	s.parsed[p.UID] = e
	return e
}
