package deletioncost

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// offQuota is how far counts are from the quota at their size: the pods
// below each group's lower quota and above its upper quota.
func offQuota(m *apportion.Method, counts []int64) int64 {
	var n, off int64
	for _, c := range counts {
		n += c
	}
	for g, sh := range m.Shares(n, apportion.All) {
		off += max(0, sh.Lower-counts[g]) + max(0, counts[g]-sh.Upper())
	}
	return off
}

// closest is the least offQuota of the splits of n pods that fit between lo
// and hi, group by group: what the pods that exist allow.
func closest(m *apportion.Method, n int64, lo, hi []int64) int64 {
	best := int64(-1)
	x := make([]int64, len(lo))
	var walk func(g int, left int64)
	walk = func(g int, left int64) {
		if g == len(x)-1 {
			if left < lo[g] || left > hi[g] {
				return
			}
			x[g] = left
			if off := offQuota(m, x); best < 0 || off < best {
				best = off
			}
			return
		}
		for x[g] = lo[g]; x[g] <= min(hi[g], left); x[g]++ {
			walk(g+1, left-x[g])
		}
	}
	walk(0, n)
	return best
}

// outageRun is a workload placed while group out cannot get capacity for
// its first k pods, then scaled up to n by the engine once it is back (each
// pod with the cost the placement controller writes), then down to one pod,
// the lowest cost first as the ReplicaSet controller does. It fails when a
// size is further off quota than the pods that exist allow (from the first
// scale-up after the outage on), or, with two groups, when a pod placed or
// removed changes another pod's cost (with more, the costs the controller
// computes are written back).
func outageRun(t *testing.T, spec string, out, k, n int) {
	t.Helper()
	s, err := strategy.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := compiled.New(s)
	m, keys := cs.Method, s.Keys()
	counts := make([]int64, len(keys))
	var pods []*corev1.Pod
	check := func(when string) {
		t.Helper()
		costs := costsOf(cs, pods)
		for _, p := range pods {
			if got := costs[p.UID]; got != cost(t, p) && len(keys) == 2 {
				t.Fatalf("%s, outage %d, %s: %s's cost moves from %d to %d", spec, k, when, p.Name, cost(t, p), got)
			}
		}
		applyCosts(pods, costs)
	}
	place := func(i int, avail apportion.Set) {
		g := m.Next(counts, avail)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", i), UID: types.UID(fmt.Sprintf("uid-%d", i)),
			Annotations: map[string]string{annotations.Group: keys[g]}}}
		if avail != apportion.All {
			p.Annotations[annotations.Fallback] = keys[out]
		}
		if c, ok := decision.GroupCost(m, g, counts[g]+1); ok {
			p.Annotations[Annotation] = strconv.Itoa(c)
		} else if len(keys) == 2 {
			t.Fatalf("%s: group %d's pod %d has no position", spec, g, counts[g]+1)
		}
		counts[g]++
		pods = append(pods, p)
		check("placing " + p.Name)
	}
	for i := range k {
		place(i, apportion.All.Without(out))
	}
	floor := slices.Clone(counts) // the pods placed during the outage stay while it scales up
	for i := k; i < n; i++ {
		place(i, apportion.All)
		if off, best := offQuota(m, counts), closest(m, int64(i+1), floor, counts); off > best {
			t.Fatalf("%s, outage %d: scaling up to %d reached %v, %d off quota, where %d is possible", spec, k, i+1, counts, off, best)
		}
	}
	peak := slices.Clone(counts)
	for len(pods) > 1 {
		low := 0
		for i, p := range pods {
			if cost(t, p) < cost(t, pods[low]) {
				low = i
			}
		}
		counts[cs.Index[pods[low].Annotations[annotations.Group]]]--
		gone := pods[low].Name
		pods = slices.Delete(pods, low, low+1)
		check("removing " + gone)
		if off, best := offQuota(m, counts), closest(m, int64(len(pods)), make([]int64, len(counts)), peak); off > best {
			t.Fatalf("%s, outage %d, scaled up to %d: scaling down to %d reached %v, %d off quota, where %d is possible", spec, k, n, len(pods), counts, off, best)
		}
	}
}

const seed004 = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// TestOutageThenScaling: the AWS sample's strategy, spot out for the first k
// pods (on-demand takes them), then scaled up to n and down to one: every
// size from the first scale-up after the outage is within quota or as close
// as the pods that exist allow, and no pod placed or removed moves another's
// cost.
func TestOutageThenScaling(t *testing.T) {
	for _, tc := range []struct{ k, n int }{{1, 10}, {3, 12}, {5, 20}, {10, 15}, {10, 60}, {20, 30}, {50, 200}} {
		t.Run(fmt.Sprintf("outage %d up to %d", tc.k, tc.n), func(t *testing.T) {
			outageRun(t, seed004, 1, tc.k, tc.n)
		})
	}
}

// TestRandomOutagesThenScaling: TestOutageThenScaling over random strategies
// of two to four groups, a random group out for a random number of pods.
func TestRandomOutagesThenScaling(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 26))
	for range 300 {
		groups := 2 + r.IntN(3)
		spec := ""
		for i := range groups {
			if i > 0 {
				spec += ":"
			}
			spec += fmt.Sprintf("g=%d,base=%d,weight=%d", i, r.IntN(3), 1+r.IntN(6))
		}
		k := 1 + r.IntN(25)
		outageRun(t, spec, r.IntN(groups), k, k+1+r.IntN(40))
	}
}
