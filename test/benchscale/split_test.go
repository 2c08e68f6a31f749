package main

import (
	"strings"
	"testing"
	"time"
)

const capacitySpread = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

var testNodes = map[string]map[string]string{
	"od":   {"karpenter.sh/capacity-type": "on-demand", "kubernetes.io/arch": "amd64"},
	"spot": {"karpenter.sh/capacity-type": "spot", "kubernetes.io/arch": "amd64"},
	"gpu":  {"dedicated": "gpu"},
}

// records returns n undecided pods of workload w on node ("": none).
func records(w, node string, n int) []podRecord {
	out := make([]podRecord, n)
	for i := range out {
		out[i] = podRecord{workload: w, node: node}
	}
	return out
}

func TestCheckSplit(t *testing.T) {
	w := workload{name: "w", strategy: capacitySpread}
	for _, tc := range []struct {
		name      string
		recs      []podRecord
		within    bool
		deviation float64
		counts    string
	}{
		// 10 pods: base 2 on-demand, 8 left 1:3 = 2 on-demand, 6 spot.
		{"exact", append(records("w", "od", 4), records("w", "spot", 6)...), true, 0,
			"karpenter.sh/capacity-type=on-demand: 4 (ideal 4.00); karpenter.sh/capacity-type=spot: 6 (ideal 6.00)"},
		// 11 pods: 2 + 9/4 = 4.25 on-demand, 6.75 spot: 4/7 is within.
		{"floor and ceiling", append(records("w", "od", 4), records("w", "spot", 7)...), true, 0.25, ""},
		{"one too many on spot", append(records("w", "od", 3), records("w", "spot", 7)...), false, 1, ""},
		{"a pod on a node of no group", append(records("w", "od", 4), append(records("w", "spot", 5), records("w", "gpu", 1)...)...), false, 2,
			"(no group): 1"},
		{"a pod not scheduled", append(records("w", "od", 4), append(records("w", "spot", 5), records("w", "", 1)...)...), false, 2,
			"(not scheduled): 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := checkSplit(w, tc.recs, testNodes)
			if sp.Within != tc.within || sp.Deviation != tc.deviation {
				t.Errorf("within %v deviation %g, want %v %g: %s", sp.Within, sp.Deviation, tc.within, tc.deviation, sp.describe())
			}
			if !strings.Contains(sp.describe(), tc.counts) {
				t.Errorf("describe() = %q, want it to contain %q", sp.describe(), tc.counts)
			}
		})
	}
}

func TestWorst(t *testing.T) {
	splits := checkSplits([]workload{{"a", capacitySpread}, {"b", capacitySpread}, {"c", capacitySpread}},
		append(append(records("a", "od", 10), records("b", "spot", 10)...), records("c", "od", 4)...), testNodes)
	w, ok := worst(splits)
	if !ok || w.Workload != "a" || w.Within {
		t.Errorf("worst = %s (within %v), want a: 10 on-demand of 10 is furthest from 4", w.Workload, w.Within)
	}
	if _, ok := worst(nil); ok {
		t.Error("worst of no splits reported one")
	}
}

func TestMeasureBurst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	recs := []podRecord{
		{seen: at(1), gated: true, decided: at(2), bound: at(3), running: at(4)},
		{seen: at(1), gated: true, decided: at(5), bound: at(6), running: at(9)},
		{seen: at(2), gated: true, bound: at(7)}, // released undecided, not Running yet
		{seen: at(3), bound: at(4), running: at(5)},
	}
	res := measureBurst(recs, 4, t0)
	if res.Reached != "scheduled" || res.ToScheduled != 7 || res.ToRunning != 0 {
		t.Errorf("reached %q scheduled %gs running %gs, want scheduled 7s and no Running time", res.Reached, res.ToScheduled, res.ToRunning)
	}
	if res.Decided != 2 || res.Gated != 3 || res.Ungated != 1 || res.ToDecided != 0 {
		t.Errorf("decided %d gated %d ungated %d to decided %g, want 2 3 1 0", res.Decided, res.Gated, res.Ungated, res.ToDecided)
	}
	if res.DecisionsPerSecond != 0.5 || res.MaxGateWait != 4 {
		t.Errorf("decisions per second %g, longest gate wait %g; want 0.5 (2 in 4 s) and 4", res.DecisionsPerSecond, res.MaxGateWait)
	}
	if res := measureBurst(recs[:3], 4, t0); res.Reached != "" || res.ToScheduled != 0 {
		t.Errorf("3 of 4 pods: reached %q after %gs, want nothing", res.Reached, res.ToScheduled)
	}
}
