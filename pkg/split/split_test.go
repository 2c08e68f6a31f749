package split

import (
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
)

const odSpot = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

func mustParse(t *testing.T) *compiled.Strategy {
	t.Helper()
	s, err := compiled.Parse(odSpot)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func nodes(ct string, n int) []map[string]string {
	out := make([]map[string]string, n)
	for i := range out {
		out[i] = map[string]string{"karpenter.sh/capacity-type": ct, "kubernetes.io/arch": "amd64"}
	}
	return out
}

func TestComputeWithinQuota(t *testing.T) {
	s := mustParse(t)
	got := Compute(Input{Strategy: s, Replicas: 10, NodeLabels: append(nodes("on-demand", 4), nodes("spot", 6)...)})
	if !got.WithinQuota || got.Drifting() {
		t.Fatalf("4/6 at 10 should be within quota: %+v", got)
	}
	if got.Groups[0].Desired != 4 || got.Groups[1].Desired != 6 || got.Running != 10 {
		t.Fatalf("desired 4/6 at 10 replicas, running 10: %+v", got)
	}
	if got.Groups[0].Min != 4 || got.Groups[0].Max != 4 {
		t.Fatalf("on-demand bounds at 10 are 4-4: %+v", got.Groups[0])
	}
}

func TestComputeOutsideQuota(t *testing.T) {
	s := mustParse(t)
	got := Compute(Input{Strategy: s, Replicas: 10, NodeLabels: nodes("on-demand", 10)})
	if got.WithinQuota || !got.Drifting() {
		t.Fatalf("10/0 at 10 is outside quota: %+v", got)
	}
	if d := got.Describe(); !strings.Contains(d, "group 2 (karpenter.sh/capacity-type=spot) 0 running, quota 6, 6 wanted at 10 replicas") {
		t.Fatalf("Describe: %s", d)
	}
}

func TestComputeLeftOut(t *testing.T) {
	s := mustParse(t)
	got := Compute(Input{Strategy: s, Replicas: 10, LeftOut: []string{"", "NodePool spot has taints the pods do not tolerate"}, NodeLabels: nodes("on-demand", 10)})
	// Over the served groups alone 10 on-demand is the quota, but a
	// group is left out: drifting all the same.
	if !got.WithinQuota || !got.LeftOut || !got.Drifting() {
		t.Fatalf("left-out group: %+v", got)
	}
	if got.Groups[0].Desired != 10 || got.Groups[1].Desired != 0 {
		t.Fatalf("desired over served groups: %+v", got.Groups)
	}
	if !strings.Contains(got.Describe(), "left out: NodePool spot") {
		t.Fatalf("Describe: %s", got.Describe())
	}
	none := Compute(Input{Strategy: s, Replicas: 3, LeftOut: []string{"a", "b"}})
	if none.WithinQuota {
		t.Fatalf("no group served is never within quota: %+v", none)
	}
}

func TestComputeUnmatched(t *testing.T) {
	s := mustParse(t)
	in := append(nodes("on-demand", 4), nodes("spot", 6)...)
	in = append(in, map[string]string{"kubernetes.io/arch": "amd64"})
	got := Compute(Input{Strategy: s, Replicas: 11, NodeLabels: in})
	if got.WithinQuota || got.Unmatched != 1 || got.Running != 11 {
		t.Fatalf("a pod outside every group is drift: %+v", got)
	}
}

// TestNextMatchesSequence: the next pods from empty counts are the engine's
// own sequence.
func TestNextMatchesSequence(t *testing.T) {
	s := mustParse(t)
	got := Next(s, make([]int64, 2), Available(nil, 2), 10)
	want := s.Method.Sequence(10)
	if len(got) != len(want) {
		t.Fatalf("got %v want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %v want %v", got, want)
		}
	}
	if n := Next(s, []int64{0, 0}, Available([]string{"x", "y"}, 2), 5); len(n) != 0 {
		t.Fatalf("no group available: %v", n)
	}
}

// TestComputeCaps: a capped group's desired count stops at its cap; with
// every group capped, the pods beyond caps may run anywhere (on a capped
// group's nodes or on nodes of no group) without the split drifting, but
// no more of them than are beyond caps, and a capped group short of its
// cap still drifts.
func TestComputeCaps(t *testing.T) {
	s, err := compiled.Parse("karpenter.sh/capacity-type=on-demand,weight=1,max=3:karpenter.sh/capacity-type=spot,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	got := Compute(Input{Strategy: s, Replicas: 10, NodeLabels: append(nodes("on-demand", 3), nodes("spot", 7)...)})
	if !got.WithinQuota || got.Groups[0].Desired != 3 || got.Groups[1].Desired != 7 || got.Groups[0].Cap != 3 || got.BeyondCaps != 0 {
		t.Fatalf("3/7 at 10 with on-demand capped at 3: %+v", got)
	}
	if d := got.Describe(); !strings.Contains(d, "3 (cap 3) wanted at 10 replicas") {
		t.Errorf("Describe: %s", d)
	}
	if got := Compute(Input{Strategy: s, Replicas: 10, NodeLabels: append(nodes("on-demand", 5), nodes("spot", 5)...)}); got.WithinQuota {
		t.Errorf("5/5 with on-demand capped at 3 is within quota: %+v", got)
	}

	all, err := compiled.Parse("karpenter.sh/capacity-type=on-demand,weight=1,max=2:karpenter.sh/capacity-type=spot,weight=1,max=3")
	if err != nil {
		t.Fatal(err)
	}
	other := []map[string]string{{"karpenter.sh/capacity-type": "reserved"}}
	for _, tc := range []struct {
		name    string
		running []map[string]string
		within  bool
	}{
		{"two beyond caps on spot", append(nodes("on-demand", 2), nodes("spot", 5)...), true},
		{"one on on-demand, one elsewhere", append(append(nodes("on-demand", 3), nodes("spot", 3)...), other...), true},
		{"on-demand short of its cap", append(nodes("on-demand", 1), nodes("spot", 6)...), false},
		{"none beyond caps yet, one elsewhere", append(nodes("on-demand", 2), other...), false},
	} {
		got := Compute(Input{Strategy: all, Replicas: 7, NodeLabels: tc.running})
		if got.WithinQuota != tc.within || got.BeyondCaps != 2 {
			t.Errorf("%s: within %v, beyond caps %d; want %v and 2 (%s)", tc.name, got.WithinQuota, got.BeyondCaps, tc.within, got.Describe())
		}
	}
	if next := Next(all, []int64{2, 2}, allServed(2), 3); len(next) != 3 || next[0] != 1 || next[1] != apportion.BeyondCaps || next[2] != apportion.BeyondCaps {
		t.Errorf("Next after 2/2: %v, want spot then beyond caps twice", next)
	}
}

// TestComputeReleasedBeyondCaps: the Running pods released beyond caps count
// in no group, whatever their node: at 7 replicas of 2 on-demand (max 2) and
// 3 spot (max 3), 2 of them with 2 and 3 in the groups are within quota and
// spot runs 3, not 5; 3 of them with spot short of its 3 are off quota,
// which counted by their node (all on spot) would look within it.
func TestComputeReleasedBeyondCaps(t *testing.T) {
	all, err := compiled.Parse("karpenter.sh/capacity-type=on-demand,weight=1,max=2:karpenter.sh/capacity-type=spot,weight=1,max=3")
	if err != nil {
		t.Fatal(err)
	}
	got := Compute(Input{Strategy: all, Replicas: 7, NodeLabels: append(nodes("on-demand", 2), nodes("spot", 3)...), BeyondCaps: 2})
	if !got.WithinQuota || got.Running != 7 || got.Groups[1].Actual != 3 || got.RunningBeyondCaps != 2 || got.Unmatched != 0 {
		t.Errorf("2/3 and 2 released beyond caps: %+v (%s)", got, got.Describe())
	}
	for _, tc := range []struct {
		name string
		in   Input
	}{
		{"spot short, 3 released beyond caps", Input{NodeLabels: append(nodes("on-demand", 2), nodes("spot", 2)...), BeyondCaps: 3}},
		{"released beyond caps below every cap", Input{NodeLabels: append(nodes("on-demand", 1), nodes("spot", 2)...), BeyondCaps: 1}},
	} {
		tc.in.Strategy, tc.in.Replicas = all, 7
		if got := Compute(tc.in); got.WithinQuota {
			t.Errorf("%s: within quota (%s)", tc.name, got.Describe())
		}
	}
	// The same pods without the mark (released before it existed), counted
	// by their spot node: the split cannot tell them apart, and takes 2 of
	// the 5 on spot for the 2 the caps allow beyond them.
	if got := Compute(Input{Strategy: all, Replicas: 7, NodeLabels: append(nodes("on-demand", 2), nodes("spot", 5)...)}); !got.WithinQuota {
		t.Errorf("unmarked, counted by node: off quota (%s)", got.Describe())
	}
}

// allServed is every one of n groups served.
func allServed(n int) apportion.Set { return Available(make([]string, n), n) }
