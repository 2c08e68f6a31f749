package split

import (
	"strings"
	"testing"

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
