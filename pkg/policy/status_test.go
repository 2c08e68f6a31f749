package policy

import (
	"errors"
	"math"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/apportion"
)

// TestDesiredIsTheSteppedSplit: Desired, computed in closed form, is the
// split the placement controller reaches one pod at a time, for every
// replica count up to several hundred, with every group served and with a
// group left out.
func TestDesiredIsTheSteppedSplit(t *testing.T) {
	groups := &v1alpha1.Strategy{Groups: []v1alpha1.Group{
		{Labels: map[string]string{ct: "on-demand"}, Base: 3, Weight: 2},
		{Labels: map[string]string{ct: "spot"}, Base: 1, Weight: 5},
		{Labels: map[string]string{ct: "reserved"}, Weight: 3},
	}}
	p := pol("a", 1, ref(), groups)
	m, err := apportion.New([]apportion.Group{{Base: 3, Weight: 2}, {Base: 1, Weight: 5}, {Weight: 3}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		pools []GroupPool
		avail apportion.Set
	}{
		{"every group served", []GroupPool{{NodePool: "od"}, {NodePool: "spot"}, {NodePool: "reserved"}}, apportion.All},
		{"spot without a NodePool", []GroupPool{{NodePool: "od"}, {Err: errors.New("none")}, {NodePool: "reserved"}}, apportion.All.Without(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stepped := make([]int64, 3)
			for n := int32(0); n <= 400; n++ {
				st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: n, Winner: "a"}}, tc.pools, metav1.NewTime(epoch))
				for i := range stepped {
					if int64(st.Groups[i].Desired) != stepped[i] {
						t.Fatalf("%d replicas: desired %v, stepping gives %v", n, st.Groups, stepped)
					}
				}
				stepped[m.Next(stepped, tc.avail)]++
			}
		})
	}
}

// BenchmarkStatusHugeReplicas: one workload at ten million replicas (the
// status stepped the engine once per replica: 29 s per reconcile).
func BenchmarkStatusHugeReplicas(b *testing.B) {
	p := pol("a", 1, ref(), seed004Groups())
	workloads := []Workload{{Kind: "Deployment", Name: "web", Replicas: 10_000_000, Winner: "a"}}
	pools := []GroupPool{{NodePool: "od"}, {NodePool: "spot"}}
	now := metav1.NewTime(epoch)
	for b.Loop() {
		if st := Status(p, workloads, pools, now); st.Groups[0].Desired+st.Groups[1].Desired != 10_000_000 {
			b.Fatalf("groups %+v", st.Groups)
		}
	}
}

// TestSumsSaturate: the sums over the placed workloads stop at the largest
// int32 instead of wrapping negative (three workloads at the largest
// replica count: the replicas and the spot pods are well past it).
func TestSumsSaturate(t *testing.T) {
	p := pol("a", 1, ref(), seed004Groups())
	m, err := apportion.New([]apportion.Group{{Base: 2, Weight: 1}, {Weight: 3}})
	if err != nil {
		t.Fatal(err)
	}
	var workloads []Workload
	want := make([]int64, 2)
	for _, name := range []string{"a", "b", "c"} {
		workloads = append(workloads, Workload{Kind: "Deployment", Name: name, Replicas: math.MaxInt32, Winner: "a"})
		for i, c := range m.CountsAt(math.MaxInt32, apportion.All) {
			want[i] = min(want[i]+c, math.MaxInt32)
		}
	}
	st := Status(p, workloads, []GroupPool{{NodePool: "od"}, {NodePool: "spot"}}, metav1.NewTime(epoch))
	if st.Replicas != math.MaxInt32 {
		t.Errorf("replicas %d, want %d", st.Replicas, math.MaxInt32)
	}
	for i, g := range st.Groups {
		if int64(g.Desired) != want[i] {
			t.Errorf("group %s: desired %d, want %d", g.Key, g.Desired, want[i])
		}
	}
	if want[1] != math.MaxInt32 {
		t.Errorf("spot sums to %d: the test wants a sum past the largest int32", want[1])
	}
}

// TestStatusCaps: with every group capped, Desired stops at the caps, the
// pods past them are counted as beyond caps, and those running on a capped
// group's nodes or on nodes of no group leave the workload within quota.
func TestStatusCaps(t *testing.T) {
	p := pol("a", 1, ref(), &v1alpha1.Strategy{Groups: []v1alpha1.Group{
		{Labels: map[string]string{ct: "on-demand"}, Weight: 1, Max: ptr.To[int32](2)},
		{Labels: map[string]string{ct: "spot"}, Weight: 1, Max: ptr.To[int32](3)},
	}})
	pools := []GroupPool{{NodePool: "od"}, {NodePool: "spot"}}
	on := func(v string, n int) []map[string]string {
		out := make([]map[string]string, n)
		for i := range out {
			out[i] = map[string]string{ct: v}
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		running  []map[string]string
		released int64 // Running pods released beyond caps
		within   bool
		spot     int32
	}{
		{"beyond caps on spot and elsewhere", append(append(on("on-demand", 2), on("spot", 4)...), on("reserved", 1)...), 0, true, 4},
		{"on-demand short of its cap", append(on("on-demand", 1), on("spot", 6)...), 0, false, 6},
		{"released beyond caps, in no group", append(on("on-demand", 2), on("spot", 3)...), 2, true, 3},
		{"released beyond caps, spot short of its cap", append(on("on-demand", 2), on("spot", 2)...), 3, false, 2},
	} {
		st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: 7, Winner: "a", NodeLabels: tc.running, BeyondCaps: tc.released}}, pools, metav1.NewTime(epoch))
		if st.Groups[0].Desired != 2 || st.Groups[1].Desired != 3 || st.BeyondCaps != 2 {
			t.Errorf("%s: desired %+v, beyond caps %d; want 2, 3 and 2 beyond", tc.name, st.Groups, st.BeyondCaps)
		}
		if st.WithinQuota != tc.within || st.Groups[1].Actual != tc.spot {
			t.Errorf("%s: within quota %v, spot %d; want %v, %d (unmatched %d)", tc.name, st.WithinQuota, st.Groups[1].Actual, tc.within, tc.spot, st.Unmatched)
		}
	}
}
