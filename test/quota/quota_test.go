package quota

import (
	"testing"

	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

const (
	od   = "karpenter.sh/capacity-type=on-demand"
	spot = "karpenter.sh/capacity-type=spot"
	// base 2 on-demand, the rest 1:3: at 12 pods, 4.5 on-demand and 7.5
	// spot; at 10, 4 and 6.
	capacitySpread = od + ",base=2,weight=1:" + spot + ",weight=3"
)

func TestLive(t *testing.T) {
	s, err := compiled.Parse(capacitySpread)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		counts map[string]int64
		pods   int64
		why    string
	}{
		{"at parallelism, within", map[string]int64{od: 5, spot: 7}, 0, ""},
		{"at parallelism, one too many on-demand", map[string]int64{od: 6, spot: 6}, 1,
			od + ": 6, quota 4..5 of 12; " + spot + ": 6, quota 7..8 of 12"},
		{"at parallelism, a pod in no group", map[string]int64{od: 4, spot: 7, "(no group)": 1}, 1,
			"(no group): 1"},
		// 8 live of 12: on-demand at 4.5 of 12 is short of nothing the
		// next pods cannot add, although at 8 its share is 3.5.
		{"fewer, a group short of its share at their count", map[string]int64{od: 5, spot: 3}, 0, ""},
		{"fewer, a group above its ceiling at parallelism", map[string]int64{od: 6, spot: 2}, 1,
			od + ": 6, more than 5 of 12"},
		{"fewer, spot above", map[string]int64{od: 0, spot: 10}, 2, spot + ": 10, more than 8 of 12"},
		{"none live", map[string]int64{}, 0, ""},
		// More live than parallelism (a pod being replaced): the quota at
		// their count.
		{"more than parallelism", map[string]int64{od: 3, spot: 10}, 1, od + ": 3, quota 4..5 of 13; " + spot + ": 10, quota 8..9 of 13"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off := Live(s, tc.counts, 12)
			if off.Pods != tc.pods || off.String() != tc.why || off.Within() != (tc.pods == 0) {
				t.Errorf("Live(%v) = %d pods off %q, want %d %q", tc.counts, off.Pods, off, tc.pods, tc.why)
			}
		})
	}
}

func TestAt(t *testing.T) {
	s, err := compiled.Parse(od + ",weight=1:" + spot + ",weight=1:karpenter.sh/capacity-type=reserved,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	// 10 pods, 3.33 each: 4 4 2 has none above a ceiling, one pod missing
	// below the floor of the third.
	if off := At(s, map[string]int64{od: 4, spot: 4, "karpenter.sh/capacity-type=reserved": 2}); off.Pods != 1 || off.Within() {
		t.Errorf("At(4 4 2) = %d pods off %q, want 1", off.Pods, off)
	}
	if off := At(s, map[string]int64{od: 4, spot: 3, "karpenter.sh/capacity-type=reserved": 3}); !off.Within() || off.String() != "" {
		t.Errorf("At(4 3 3) = %d pods off %q, want within", off.Pods, off)
	}
}

func TestGroupOf(t *testing.T) {
	s, err := strategy.Parse("kubernetes.io/arch=amd64,weight=1:karpenter.sh/capacity-type=spot,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	amd := "kubernetes.io/arch=amd64"
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		decided string
		want    string
	}{
		{"one group", map[string]string{"kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "spot"}, "", spot},
		{"no group", map[string]string{"kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "on-demand"}, "", NoGroup},
		{"both, first written", map[string]string{"kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "spot"}, "", amd},
		{"both, the decision settles it", map[string]string{"kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "spot"}, spot, spot},
		{"a decision the node does not carry", map[string]string{"kubernetes.io/arch": "amd64"}, spot, amd},
	} {
		if got := GroupOf(s, tc.labels, tc.decided); got != tc.want {
			t.Errorf("%s: GroupOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}
