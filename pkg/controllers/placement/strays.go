package placement

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// WithNodes lets the controller count pods admitted without a decision in
// the group their node's labels match (a metadata cache of nodes). The
// tally's NodeEventHandler, registered on the same cache's node informer,
// lets a decision reuse the counts until a node's labels change.
func (c *Controller) WithNodes(nodes client.Reader) *Controller {
	c.nodes = nodes
	return c
}

// strayGroup returns the lookup the tally counts strays with: the first
// group of s whose labels the node carries (-1: none, or the node is not
// cached). The tally asks it only when a stray or a node's labels changed.
func (c *Controller) strayGroup(ctx context.Context, s *strategy.Strategy) NodeGroups {
	return nodeGroups{ctx: ctx, nodes: c.nodes, s: s}
}

// nodeGroups is strayGroup's lookup, for one decision.
type nodeGroups struct {
	ctx   context.Context
	nodes client.Reader
	s     *strategy.Strategy
}

func (g nodeGroups) Key() string { return g.s.String() }

func (g nodeGroups) Group(name string) int {
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := g.nodes.Get(g.ctx, client.ObjectKey{Name: name}, node); err != nil {
		return -1
	}
	for i, grp := range g.s.Groups {
		if labels.SelectorFromSet(grp.Selector()).Matches(labels.Set(node.Labels)) {
			return i
		}
	}
	return -1
}

// counts are the revision's decided pods per group of p and, when nodes are
// watched, its strays; seen adds the two, what the engine splits by.
func (c *Controller) counts(ctx context.Context, rev string, p *compiled.Strategy) (counts, strays, seen []int64) {
	counts = make([]int64, len(p.Strategy.Groups))
	c.tally.Counts(rev, p.Index, counts)
	seen = counts
	if c.nodes != nil {
		if strays = c.tally.StrayCounts(rev, len(counts), c.strayGroup(ctx, p.Strategy)); strays != nil {
			seen = make([]int64, len(counts))
			for i := range counts {
				seen[i] = counts[i] + strays[i]
			}
		}
	}
	return counts, strays, seen
}

// withShadowStrays are counts plus the revision's bound shadow pods by their
// node, which the deletion-cost controller ranks with the decided pods of
// their group once the workload has left shadow mode: a pod decided then
// takes its group's next rank among both. counts itself when there is none.
func (c *Controller) withShadowStrays(ctx context.Context, rev string, p *compiled.Strategy, counts []int64) []int64 {
	if c.nodes == nil {
		return counts
	}
	shadows := c.tally.ShadowStrayCounts(rev, len(counts), c.strayGroup(ctx, p.Strategy))
	if shadows == nil {
		return counts
	}
	out := make([]int64, len(counts))
	for i := range counts {
		out[i] = counts[i] + shadows[i]
	}
	return out
}
