package deletioncost

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
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
	// Victim's order is spot spot spot od od od; newest first within a group.
	want := map[string]int{"p005": -5, "p003": -4, "p002": -3, "p004": -2, "p001": -1, "p000": 0}
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

// TestFallbackPodsGoFirst: pods placed by capacity fallback are removed
// before every pod of the split (newest first), after the strays; the rest
// keeps the Victim order.
func TestFallbackPodsGoFirst(t *testing.T) {
	s, _ := strategy.Parse("karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3")
	pods := podsFor(t, s, []int{0, 0, 1, 1, 0, 1, 0, 0})
	pods[6].Annotations[annotations.Fallback] = "karpenter.sh/capacity-type=spot"
	pods[7].Annotations[annotations.Fallback] = "karpenter.sh/capacity-type=spot"
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stray", UID: "stray"}}
	costs, err := Costs(s, append(pods, stray))
	if err != nil {
		t.Fatal(err)
	}
	order := append([]*corev1.Pod{stray}, pods...)
	sort.SliceStable(order, func(a, b int) bool { return costs[order[a].UID] < costs[order[b].UID] })
	if order[0].Name != "stray" || order[1].Name != "p007" || order[2].Name != "p006" {
		t.Fatalf("deletion order %v: want the stray, then the fallback pods newest first", names(order))
	}
	// The remaining six are the worked example's split, in its Victim order.
	rest, _ := Costs(s, pods[:6])
	for i := 3; i < len(order)-1; i++ {
		if rest[order[i].UID] > rest[order[i+1].UID] {
			t.Fatalf("after the fallback pods, order %v is not the Victim order", names(order))
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
