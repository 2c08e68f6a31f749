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
// lowest, then the pods placed by capacity fallback, then the split, in the
// order the package doc describes: a scale-down removes the fallback pods
// before it touches the split. It takes the pods' group and fallback
// annotations as their decisions (the controller passes the pods whose
// decisions do not verify without them) and their current costs as the order
// to keep where it can.
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
}

// removalOrder puts first the pod a scale-down should remove first, of two
// pods of one tier: pods without a cost (new, not yet numbered) newest first,
// then the others in the order of the costs they carry, so that a pod added
// to a revision leaves the others' places, and costs, alone.
func removalOrder(a, b ranked) int {
	switch {
	case a.hasCost != b.hasCost:
		if b.hasCost {
			return -1
		}
		return 1
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
	var split, fallback []ranked
	for _, p := range pods {
		gi, ok := s.Index[p.Annotations[annotations.Group]]
		if !ok {
			costs[p.UID] = decision.StrayCost
			continue
		}
		r := ranked{pod: p, group: gi}
		r.cost, r.hasCost = decision.DeletionCost(p)
		if p.Annotations[annotations.Fallback] != "" {
			fallback = append(fallback, r)
		} else {
			split = append(split, r)
		}
	}
	// Fallback pods: below every cost of the split, above the strays.
	slices.SortFunc(fallback, removalOrder)
	for k, r := range fallback {
		costs[r.pod.UID] = decision.FallbackPodCost(len(fallback) - k)
	}
	slices.SortFunc(split, removalOrder)
	if !withinQuotaAllTheWay(s.Method, split) {
		split = victimOrder(s.Method, split)
	}
	for k, r := range split {
		costs[r.pod.UID] = decision.SplitCost(len(split) - k)
	}
	return costs
}

// withinQuotaAllTheWay reports whether removing the pods in order keeps the
// split within quota at every size, from all of them down to none. For a
// revision grown by the engine, the newest pod first is such an order (the
// engine's own path, walked back), and so is any order a scale-down of it
// left: that is what lets the costs stay put as pods come and go.
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

// victimOrder is the order the engine's Victim removes the pods in, taking
// within a group the pods in the order they come in: for a split off quota
// somewhere on the way down (pods placed under an older strategy, or while a
// group was unavailable), Victim repairs it first and then keeps it within
// quota.
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
