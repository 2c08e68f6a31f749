package deletioncost

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Costs computes the deletion cost of every pod of one revision; pods with
// no group of s (undecided, or decided under another strategy) get the
// lowest, the others the cost of their rank in their group, in the order the
// package doc describes, pods placed by capacity fallback included. It takes
// the pods' group annotations as their decisions (the controller passes the
// pods whose decisions do not verify without them) and their current costs
// as the order of the pods within each group.
func Costs(s *strategy.Strategy, pods []*corev1.Pod) (map[types.UID]int, error) {
	cs, err := compiled.New(s)
	if err != nil {
		return nil, err
	}
	return costsOf(cs, pods), nil
}

// ranked is a pod with what its place in the order depends on.
type ranked struct {
	pod     *corev1.Pod
	group   int
	cost    int
	hasCost bool
	shadow  bool // decided in shadow mode, not numbered yet
}

// Where a pod goes in its group's order, first to last: the pods to number
// on top of the others, those the order of their costs places, and the
// shadow pods still without a cost.
const (
	rankNew = iota
	rankCosted
	rankShadow
)

func (r ranked) class() int {
	switch {
	case r.hasCost:
		return rankCosted
	case r.shadow:
		return rankShadow
	}
	return rankNew
}

// removalOrder puts first the pod a scale-down should remove first, of two
// pods of one group (or two without a position): pods without a cost (new,
// not yet numbered) newest first, then the others in the order of the costs
// they carry, so that a pod added to a revision leaves the others' places,
// and costs, alone. Shadow pods without a cost (a workload that just left
// shadow mode) come last, newest first: they ran before the pods decided
// since, which the placement controller numbered on top of them.
func removalOrder(a, b ranked) int {
	switch {
	case a.class() != b.class():
		return cmp.Compare(a.class(), b.class())
	case a.hasCost && a.cost != b.cost:
		return cmp.Compare(a.cost, b.cost)
	}
	return newestFirst(a.pod, b.pod)
}

func newestFirst(a, b *corev1.Pod) int {
	if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(b.Name, a.Name)
}

// costsOf is Costs of a compiled strategy.
func costsOf(s *compiled.Strategy, pods []*corev1.Pod) map[types.UID]int {
	costs := make(map[types.UID]int, len(pods))
	groups := make([][]ranked, len(s.Strategy.Groups))
	for _, p := range pods {
		gi, ok := s.Index[p.Annotations[annotations.Group]]
		if !ok {
			costs[p.UID] = decision.StrayCost
			continue
		}
		r := ranked{pod: p, group: gi}
		r.cost, r.hasCost = decision.DeletionCost(p)
		r.shadow = !r.hasCost && decision.HasShadow(p)
		groups[gi] = append(groups[gi], r)
	}
	// Within a group, the pod a scale-down removes first takes the group's
	// highest rank, so a pod added (without a cost, or with the one the
	// placement controller wrote) leaves every other rank alone.
	var decided, offPath []ranked
	for g, rs := range groups {
		slices.SortFunc(rs, removalOrder)
		decided = append(decided, rs...)
		for k, r := range rs {
			if cost, ok := decision.GroupCost(s.Method, g, int64(len(rs)-k)); ok {
				costs[r.pod.UID] = cost
			} else {
				offPath = append(offPath, r)
			}
		}
	}
	// The pods without a position: below every position, above the strays.
	slices.SortFunc(offPath, removalOrder)
	for k, r := range offPath {
		costs[r.pod.UID] = decision.OffPathPodCost(len(offPath) - k)
	}
	slices.SortFunc(decided, func(a, b ranked) int { return cmp.Compare(costs[a.pod.UID], costs[b.pod.UID]) })
	if withinQuotaAllTheWay(s.Method, decided) {
		return costs // the usual case: nothing goes closer
	}
	if victim := victimOrder(s.Method, decided); !asCloseAs(s.Method, decided, victim) {
		// A group short of its part, among three or more: the highest
		// positions first would leave the others further off quota than
		// the engine's Victim does.
		for k, r := range victim {
			costs[r.pod.UID] = decision.SplitCost(len(victim) - k)
		}
	}
	return costs
}

// withinQuotaAllTheWay reports whether removing the pods in order keeps the
// split within quota at every size, from all of them down to none.
func withinQuotaAllTheWay(m *apportion.Method, order []ranked) bool {
	counts := make([]int64, m.Len())
	for _, r := range order {
		counts[r.group]++
	}
	for _, r := range order {
		if !m.WithinQuota(counts, apportion.All) {
			return false
		}
		counts[r.group]--
	}
	return true
}

// asCloseAs reports whether removing the pods in order leaves the split as
// close to quota at every size as removing them in the other order. With two
// groups, the highest positions first always do: the group short of its part
// keeps its pods and the other goes down to its quota. With more, the groups
// that are not short follow their path, which Victim can beat.
func asCloseAs(m *apportion.Method, order, other []ranked) bool {
	counts := make([]int64, m.Len())
	for _, r := range order {
		counts[r.group]++
	}
	otherCounts := slices.Clone(counts)
	for k := range order {
		if m.OffQuota(counts, apportion.All) > m.OffQuota(otherCounts, apportion.All) {
			return false
		}
		counts[order[k].group]--
		otherCounts[other[k].group]--
	}
	return true
}

// victimOrder is the order the engine's Victim removes the pods in, taking
// within a group the pods in the order they come in.
func victimOrder(m *apportion.Method, order []ranked) []ranked {
	byGroup := make([][]ranked, m.Len())
	counts := make([]int64, m.Len())
	for _, r := range order {
		byGroup[r.group] = append(byGroup[r.group], r)
		counts[r.group]++
	}
	out := make([]ranked, 0, len(order))
	for range order {
		v := m.Victim(counts, apportion.All)
		out = append(out, byGroup[v][0])
		byGroup[v] = byGroup[v][1:]
		counts[v]--
	}
	return out
}
