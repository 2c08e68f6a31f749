package deletioncost

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

func podsFor(t *testing.T, s *strategy.Strategy, groups []int) []*corev1.Pod {
	t.Helper()
	keys := s.Keys()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pods := make([]*corev1.Pod, len(groups))
	for i, g := range groups {
		pods[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("p%03d", i), UID: types.UID(fmt.Sprintf("uid-%d", i)),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
			Annotations:       map[string]string{annotations.Group: keys[g]},
		}}
	}
	return pods
}

func TestWorkedExample(t *testing.T) {
	s, _ := strategy.Parse("karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3")
	pods := podsFor(t, s, []int{0, 0, 1, 1, 0, 1})
	costs, err := Costs(s, pods)
	if err != nil {
		t.Fatal(err)
	}
	// The newest pod first: every size on the way down is within quota.
	want := map[string]int{"p005": -5, "p004": -4, "p003": -3, "p002": -2, "p001": -1, "p000": 0}
	for _, p := range pods {
		if costs[p.UID] != want[p.Name] {
			t.Errorf("%s: cost %d, want %d", p.Name, costs[p.UID], want[p.Name])
		}
	}
}

// TestRemovingByCostKeepsQuota: for random strategies and workloads built by
// the engine, deleting pods lowest cost first (what the ReplicaSet controller
// does) keeps every intermediate size within quota; and adding a pod the way
// the engine would changes the cost of that pod alone in most cases.
func TestRemovingByCostKeepsQuota(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for trial := 0; trial < 300; trial++ {
		k := 1 + r.IntN(4)
		spec := ""
		for i := 0; i < k; i++ {
			if i > 0 {
				spec += ":"
			}
			spec += fmt.Sprintf("g=%d,base=%d,weight=%d", i, r.IntN(3), 1+r.IntN(6))
		}
		s, err := strategy.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		cs, _ := compiled.New(s)
		m := cs.Method
		n := 1 + r.IntN(60)
		pods := podsFor(t, s, m.Sequence(n))
		costs, err := Costs(s, pods)
		if err != nil {
			t.Fatal(err)
		}
		sort.SliceStable(pods, func(a, b int) bool { return costs[pods[a].UID] < costs[pods[b].UID] })
		counts := m.Counts(n)
		index := map[string]int{}
		for i, key := range s.Keys() {
			index[key] = i
		}
		for _, p := range pods {
			counts[index[p.Annotations[annotations.Group]]]--
			if !m.WithinQuota(counts, apportion.All) {
				t.Fatalf("%s, %d pods: deleting by cost reached %v, off quota", spec, n, counts)
			}
		}
	}
}

func TestUnknownGroupGoesFirst(t *testing.T) {
	s, _ := strategy.Parse("a=1,weight=1:a=2,weight=1")
	pods := podsFor(t, s, []int{0, 1, 0})
	pods[1].Annotations[annotations.Group] = "old=group"
	costs, _ := Costs(s, pods)
	if costs[pods[1].UID] >= costs[pods[0].UID] || costs[pods[1].UID] >= costs[pods[2].UID] {
		t.Errorf("costs %v: the pod of an unknown group should go first", costs)
	}
}

// TestFallbackPodsCountInTheirGroup: pods placed by capacity fallback
// count in the group they run in. Spot out for the first four pods (all
// on-demand), then eight spot pods: on-demand is within quota, so a
// scale-down takes spot pods first and a fallback pod only once on-demand is
// above its quota; the stray still goes first of all, and every size on the
// way down is within quota.
func TestFallbackPodsCountInTheirGroup(t *testing.T) {
	s, _ := strategy.Parse("karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3")
	pods := podsFor(t, s, []int{0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1})
	for _, p := range pods[:4] {
		p.Annotations[annotations.Fallback] = "karpenter.sh/capacity-type=spot"
	}
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stray", UID: "stray"}}
	costs, err := Costs(s, append(slices.Clone(pods), stray))
	if err != nil {
		t.Fatal(err)
	}
	order := append([]*corev1.Pod{stray}, pods...)
	sort.SliceStable(order, func(a, b int) bool { return costs[order[a].UID] < costs[order[b].UID] })
	if got := names(order[:5]); !slices.Equal(got, []string{"stray", "p011", "p010", "p009", "p003"}) {
		t.Fatalf("deletion order %v: want the stray, three spot pods, then the newest fallback pod", names(order))
	}
	cs, _ := compiled.New(s)
	counts := []int64{4, 8}
	for _, p := range order[1:] {
		counts[cs.Index[p.Annotations[annotations.Group]]]--
		if !cs.Method.WithinQuota(counts, apportion.All) {
			t.Fatalf("deleting by cost (order %v) reached %v, off quota", names(order), counts)
		}
	}
}

func names(pods []*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

// applyCosts writes costs onto the pods, as the controller's patches do.
func applyCosts(pods []*corev1.Pod, costs map[types.UID]int) {
	for _, p := range pods {
		p.Annotations[Annotation] = strconv.Itoa(costs[p.UID])
	}
}

// TestScalingKeepsTheOthersCosts: for random strategies, a workload scaled up
// by the engine and down by cost (lowest first, as the ReplicaSet controller
// does) in random steps: each pod added takes the split's lowest cost,
// decision.SplitCost, and changes no other pod's cost; each pod removed
// changes none; every size on the way down stays within quota.
func TestScalingKeepsTheOthersCosts(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for trial := 0; trial < 200; trial++ {
		spec := randomSpec(r)
		s, err := strategy.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		cs, _ := compiled.New(s)
		keys := s.Keys()
		var pods []*corev1.Pod
		counts := make([]int64, len(keys))
		for step := 0; step < 80; step++ {
			if len(pods) > 0 && r.IntN(3) == 0 {
				// Scale down: the lowest cost goes.
				low := 0
				for i, p := range pods {
					if cost(t, p) < cost(t, pods[low]) {
						low = i
					}
				}
				counts[cs.Index[pods[low].Annotations[annotations.Group]]]--
				pods = slices.Delete(pods, low, low+1)
				if !cs.Method.WithinQuota(counts, apportion.All) {
					t.Fatalf("%s: removing by cost reached %v, off quota", spec, counts)
				}
			} else {
				g := cs.Method.Next(counts, apportion.All)
				counts[g]++
				pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", step), UID: types.UID(fmt.Sprintf("uid-%d", step)),
					Annotations: map[string]string{Annotation: strconv.Itoa(decision.SplitCost(len(pods) + 1)), annotations.Group: keys[g]}}})
			}
			costs := costsOf(cs, pods)
			for _, p := range pods {
				if got := costs[p.UID]; got != cost(t, p) {
					t.Fatalf("%s, step %d: %s's cost moves from %d to %d", spec, step, p.Name, cost(t, p), got)
				}
			}
		}
	}
}

func randomSpec(r *rand.Rand) string {
	spec := ""
	for i := range 1 + r.IntN(4) {
		if i > 0 {
			spec += ":"
		}
		spec += fmt.Sprintf("g=%d,base=%d,weight=%d", i, r.IntN(3), 1+r.IntN(6))
	}
	return spec
}

func cost(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	n, ok := decision.DeletionCost(p)
	if !ok {
		t.Fatalf("%s has no cost", p.Name)
	}
	return n
}

// TestOffQuotaSplitFollowsVictim: a split the newest-first order cannot walk
// down within quota (four pods in b, then one in a, for equal weights) goes
// down the way the engine's Victim would, b's excess first; the costs it
// gives are then kept as they are. (At one pod each, the tie goes against
// the later group.)
func TestOffQuotaSplitFollowsVictim(t *testing.T) {
	s, _ := strategy.Parse("g=a,weight=1:g=b,weight=1")
	pods := podsFor(t, s, []int{1, 1, 1, 1, 0})
	costs, err := Costs(s, pods)
	if err != nil {
		t.Fatal(err)
	}
	order := slices.Clone(pods)
	sort.SliceStable(order, func(a, b int) bool { return costs[order[a].UID] < costs[order[b].UID] })
	if got := names(order); !slices.Equal(got, []string{"p003", "p002", "p001", "p000", "p004"}) {
		t.Fatalf("deletion order %v: want b's excess first, newest first, then Victim's tie (the later group)", got)
	}
	applyCosts(pods, costs)
	again, _ := Costs(s, pods)
	if !maps.Equal(again, costs) {
		t.Errorf("costs %v become %v when computed again", costs, again)
	}
}

// TestWrittenCostsKeepTheirOrder: costs a client swapped between two pods of
// one group are kept (the order stays within quota): the controller does not
// fight over which of two equivalent pods goes first.
func TestWrittenCostsKeepTheirOrder(t *testing.T) {
	s, _ := strategy.Parse("karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3")
	pods := podsFor(t, s, []int{0, 0, 1, 1, 0, 1})
	costs, _ := Costs(s, pods)
	costs[pods[2].UID], costs[pods[5].UID] = costs[pods[5].UID], costs[pods[2].UID]
	applyCosts(pods, costs)
	again, _ := Costs(s, pods)
	if !maps.Equal(again, costs) {
		t.Errorf("written costs %v become %v", costs, again)
	}
}

// TestWorkedExampleAfterOutage is the package doc's second example: five
// pods on-demand while spot was out, then five on spot.
func TestWorkedExampleAfterOutage(t *testing.T) {
	s, _ := strategy.Parse("karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3")
	pods := podsFor(t, s, []int{0, 0, 0, 0, 0, 1, 1, 1, 1, 1})
	for _, p := range pods[:5] {
		p.Annotations[annotations.Fallback] = "karpenter.sh/capacity-type=spot"
	}
	costs, err := Costs(s, pods)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"p004": -12, "p003": -8, "p009": -7, "p008": -6, "p007": -5, "p002": -4, "p006": -3, "p005": -2, "p001": -1, "p000": 0}
	for _, p := range pods {
		if costs[p.UID] != want[p.Name] {
			t.Errorf("%s: cost %d, want %d", p.Name, costs[p.UID], want[p.Name])
		}
	}
}

// TestCapsRemovingByCost: with caps, deleting the pods of a workload the
// engine grew lowest cost first keeps every size within quota of the capped
// shares; and pods a group holds past its cap (placed before the cap was
// written) go first.
func TestCapsRemovingByCost(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 11))
	for trial := 0; trial < 300; trial++ {
		k := 1 + r.IntN(4)
		spec := ""
		for i := 0; i < k; i++ {
			if i > 0 {
				spec += ":"
			}
			b := r.IntN(3)
			spec += fmt.Sprintf("g=%d,base=%d,weight=%d", i, b, 1+r.IntN(6))
			if r.IntN(2) == 0 {
				spec += fmt.Sprintf(",max=%d", max(b, 1)+r.IntN(10))
			}
		}
		s, err := strategy.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		cs, _ := compiled.New(s)
		m := cs.Method
		var seq []int
		for _, g := range m.Sequence(1 + r.IntN(60)) {
			if g >= 0 {
				seq = append(seq, g)
			}
		}
		pods := podsFor(t, s, seq)
		costs, err := Costs(s, pods)
		if err != nil {
			t.Fatal(err)
		}
		sort.SliceStable(pods, func(a, b int) bool { return costs[pods[a].UID] < costs[pods[b].UID] })
		counts := make([]int64, len(s.Groups))
		for _, g := range seq {
			counts[g]++
		}
		index := map[string]int{}
		for i, key := range s.Keys() {
			index[key] = i
		}
		for _, p := range pods {
			counts[index[p.Annotations[annotations.Group]]]--
			if !m.WithinQuota(counts, apportion.All) {
				t.Fatalf("%s, %d pods: deleting by cost reached %v, off quota", spec, len(seq), counts)
			}
		}
	}

	s, _ := strategy.Parse("karpenter.sh/capacity-type=on-demand,weight=1,max=2:karpenter.sh/capacity-type=spot,weight=1")
	pods := podsFor(t, s, []int{0, 1, 0, 1, 0, 0}) // on-demand holds 4, 2 past its cap
	costs, err := Costs(s, pods)
	if err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(pods, func(a, b int) bool { return costs[pods[a].UID] < costs[pods[b].UID] })
	for _, p := range pods[:2] {
		if p.Annotations[annotations.Group] != "karpenter.sh/capacity-type=on-demand" {
			t.Errorf("removed first: %v, want the on-demand pods past the cap (costs %v)", names(pods), costs)
		}
	}
}
