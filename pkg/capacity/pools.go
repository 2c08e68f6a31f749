package capacity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Capacity answers, for each group of a strategy, whether it can be served
// and how: by a NodePool (Karpenter mode) or by existing nodes carrying the
// group's labels (node-label mode, for clusters without Karpenter). archs,
// when not empty, are the architectures the pod's images run on: a group is
// served only where one of them can be. scope, when not empty, is the UID of
// the pod's workload: outages marked for that workload alone count too.
type Capacity interface {
	Choose(ctx context.Context, s *strategy.Strategy, pod *corev1.Pod, archs []string, scope string) ([]catalog.Choice, []error, error)
}

// NodePoolCapacity serves groups from the cached NodePools. The catalog is
// built once and rebuilt only after Invalidate (the operator calls it from
// the NodePool informer's events), so a decision lists no NodePools. A pool
// the Tracker marks out, or whose own state shows it cannot take a pod
// (fullPools), is passed over for the group's next one. A group
// that no pool serves because one of its label keys is on no pool has the
// key named first when no node carries it either (a typo, most often): the
// nodes' label keys are read from the cache for that, once until
// InvalidateNodes.
type NodePoolCapacity struct {
	Reader client.Reader
	// Tracker, when set, says which NodePools are out of capacity for now:
	// a group goes to its next pool, or is left out.
	Tracker *Tracker
	// Clock times the answer of which pools are full; nil: the real one.
	Clock clock.PassiveClock

	mu      sync.Mutex
	stale   bool
	current *catalog.Catalog
	pools   []*karpv1.NodePool

	full  fullPools
	nodes nodeKeys
}

// InvalidateNodes forgets the label keys of the nodes; the operator calls
// it when a node comes or goes or its labels change.
func (n *NodePoolCapacity) InvalidateNodes() { n.nodes.invalidate() }

// Invalidate marks the catalog, and which pools are full, for a rebuild at
// the next decision.
func (n *NodePoolCapacity) Invalidate() {
	n.mu.Lock()
	n.stale = true
	n.mu.Unlock()
	n.full.invalidate()
}

func (n *NodePoolCapacity) snapshot(ctx context.Context) (*catalog.Catalog, []*karpv1.NodePool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.current != nil && !n.stale {
		return n.current, n.pools, nil
	}
	var list karpv1.NodePoolList
	if err := n.Reader.List(ctx, &list); err != nil {
		return nil, nil, fmt.Errorf("listing nodepools: %w", err)
	}
	pools := make([]*karpv1.NodePool, len(list.Items))
	for i := range list.Items {
		pools[i] = &list.Items[i]
	}
	n.current, n.pools, n.stale = catalog.New(pools), pools, false
	return n.current, n.pools, nil
}

// Choose implements Capacity: errs[i] says why group i cannot be served.
func (n *NodePoolCapacity) Choose(ctx context.Context, s *strategy.Strategy, pod *corev1.Pod, archs []string, scope string) ([]catalog.Choice, []error, error) {
	cat, pools, err := n.snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	clk := n.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	full := n.full.get(ctx, n.Reader, clk, pools)
	choices := make([]catalog.Choice, len(s.Groups))
	errs := make([]error, len(s.Groups))
	out := func(pool string) error {
		if n.Tracker != nil {
			if err := unavailable(n.Tracker, PoolKey(pool), scope); err != nil {
				return err
			}
		}
		if why, ok := full[pool]; ok {
			return fmt.Errorf("%w: %s", ErrFull, why)
		}
		return nil
	}
	for i, g := range s.Groups {
		choices[i], errs[i] = cat.SelectFor(g.Selector(), pod, archs, out)
		if errors.Is(errs[i], catalog.ErrNoPool) {
			errs[i] = n.unused(ctx, cat, g, errs[i])
		}
	}
	return choices, errs, nil
}

// unused names first in err the group's label keys that no NodePool names
// and no node carries. The nodes are read only for a key no pool names,
// from the cache, once until they change.
func (n *NodePoolCapacity) unused(ctx context.Context, cat *catalog.Catalog, g strategy.Group, err error) error {
	undefined := cat.Undefined(g.LabelKeys()...)
	if len(undefined) == 0 {
		return err
	}
	unused, lerr := n.nodes.without(ctx, n.Reader, undefined)
	if lerr != nil {
		return err
	}
	return catalog.Unused(err, unused, "no NodePool and no node")
}

// nodeKeys is the set of label keys some node carries, listed from the
// node metadata cache when first asked after a change.
type nodeKeys struct {
	mu   sync.Mutex
	keys sets.Set[string]
}

func (k *nodeKeys) invalidate() {
	k.mu.Lock()
	k.keys = nil
	k.mu.Unlock()
}

// learn takes the keys from nodes just listed, unless they are known.
func (k *nodeKeys) learn(nodes []metav1.PartialObjectMetadata) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.fill(nodes)
	}
}

func (k *nodeKeys) fill(nodes []metav1.PartialObjectMetadata) {
	k.keys = sets.New[string]()
	for i := range nodes {
		for key := range nodes[i].Labels {
			k.keys.Insert(key)
		}
	}
}

// without returns the keys of keys that no node carries.
func (k *nodeKeys) without(ctx context.Context, r client.Reader, keys []string) ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		nodes := &metav1.PartialObjectMetadataList{}
		nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		if err := r.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		k.fill(nodes.Items)
	}
	var out []string
	for _, key := range keys {
		if !k.keys.Has(key) {
			out = append(out, key)
		}
	}
	return out, nil
}

// unavailable is the error for a key out of capacity, for every workload or
// for the one of scope; nil when it is not.
func unavailable(t *Tracker, key Key, scope string) error {
	if out, reason, until := t.Unavailable(key); out {
		return fmt.Errorf("out of capacity (%s) until %s", reason, until.UTC().Format(time.RFC3339))
	}
	if scope == "" {
		return nil
	}
	if out, reason, until := t.Unavailable(Scoped(scope, key)); out {
		return fmt.Errorf("out of capacity for this workload (%s) until %s", reason, until.UTC().Format(time.RFC3339))
	}
	return nil
}

// NodeLabelCapacity serves a group when some node carries all its labels
// (and, for a pod whose images run only on some architectures, one of them).
// It is the mode for clusters without the NodePool CRD (managed node groups,
// as in the EKS blog webhook). It reads node metadata from the cache, and only when a
// group's answer is not known: answers are kept until Invalidate, which the
// operator calls when a node is added or deleted or its labels change, so a
// decision does not scan the nodes.
type NodeLabelCapacity struct {
	Reader client.Reader
	// Tracker, when set, says which groups' label sets are out of capacity
	// for now (their pods stayed unschedulable past the capacity timeout).
	Tracker *Tracker
	// ScaleFromZero serves a group even when no node carries its labels
	// now: an autoscaler can create one (managed node groups scaled to
	// zero). Only the Tracker leaves such a group out.
	ScaleFromZero bool

	mu    sync.Mutex
	known map[string]bool // group key and architectures -> some node has the labels
	keys  nodeKeys
}

// maxKnownGroups bounds the answers kept between invalidations.
const maxKnownGroups = 4096

// Invalidate forgets every answer.
func (n *NodeLabelCapacity) Invalidate() {
	n.mu.Lock()
	n.known = nil
	n.mu.Unlock()
	n.keys.invalidate()
}

// Choose implements Capacity; choices carry no pool.
func (n *NodeLabelCapacity) Choose(ctx context.Context, s *strategy.Strategy, _ *corev1.Pod, archs []string, scope string) ([]catalog.Choice, []error, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.known == nil || len(n.known) > maxKnownGroups {
		n.known = map[string]bool{}
	}
	var nodes *metav1.PartialObjectMetadataList // listed at most once, if some answer is missing
	choices := make([]catalog.Choice, len(s.Groups))
	errs := make([]error, len(s.Groups))
	archKey := strings.Join(archs, ",")
	for i, g := range s.Groups {
		if arch, ok := g.Selector()[corev1.LabelArchStable]; ok && len(archs) > 0 && !slices.Contains(archs, arch) {
			errs[i] = fmt.Errorf("%w: %s=%s, images: %s", catalog.ErrArchitecture, corev1.LabelArchStable, arch, archKey)
			continue
		}
		key := g.Key() + "|" + archKey
		served, ok := n.known[key]
		if !ok {
			if nodes == nil {
				nodes = &metav1.PartialObjectMetadataList{}
				nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
				if err := n.Reader.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
					return nil, nil, fmt.Errorf("listing nodes: %w", err)
				}
				n.keys.learn(nodes.Items)
			}
			sel := labels.SelectorFromSet(g.Selector())
			for j := range nodes.Items {
				l := nodes.Items[j].Labels
				if served = sel.Matches(labels.Set(l)) && (len(archs) == 0 || slices.Contains(archs, l[corev1.LabelArchStable])); served {
					break
				}
			}
			n.known[key] = served
		}
		errs[i] = n.groupError(ctx, g, served, archKey, scope)
	}
	return choices, errs, nil
}

// groupError says why group g cannot be served (nil: it can): out of
// capacity, or no node with its labels (served: some node has them) and
// archKey's architectures, naming first the label keys no node carries.
func (n *NodeLabelCapacity) groupError(ctx context.Context, g strategy.Group, served bool, archKey, scope string) error {
	if n.Tracker != nil {
		if out := unavailable(n.Tracker, LabelsKey(g.Key()), scope); out != nil {
			return fmt.Errorf("%w: nodes with %s: %w", catalog.ErrCapacity, g.Key(), out)
		}
	}
	switch {
	case served || n.ScaleFromZero:
		return nil
	case archKey != "":
		return n.unused(ctx, g, fmt.Errorf("no node has the labels %s and one of the architectures %s", g.Key(), archKey))
	default:
		return n.unused(ctx, g, fmt.Errorf("no node has the labels %s", g.Key()))
	}
}

// unused names first in err the group's label keys that no node carries.
func (n *NodeLabelCapacity) unused(ctx context.Context, g strategy.Group, err error) error {
	unused, lerr := n.keys.without(ctx, n.Reader, g.LabelKeys())
	if lerr != nil {
		return err
	}
	return catalog.Unused(err, unused, "no node")
}

// OnLabelChange is an informer event handler that calls changed when an
// object comes or goes, or when an update changes its labels: what placing
// by node labels depends on.
func OnLabelChange(changed func()) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		DeleteFunc: func(any) { changed() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(metav1.Object)
			n, ok2 := newObj.(metav1.Object)
			if !ok1 || !ok2 || !maps.Equal(o.GetLabels(), n.GetLabels()) {
				changed()
			}
		},
	}
}
