package main

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// done marks recs Succeeded (or Failed).
func done(recs []podRecord) []podRecord {
	for i := range recs {
		recs[i].done = true
	}
	return recs
}

func decided(recs []podRecord, group string) []podRecord {
	for i := range recs {
		recs[i].group = group
	}
	return recs
}

func TestCheckSample(t *testing.T) {
	w := workload{name: "batch", strategy: capacitySpread}
	for _, tc := range []struct {
		name   string
		recs   []podRecord
		live   int
		within bool
		counts string
	}{
		{"no live pods", append(records("batch", "", 3), done(records("batch", "od", 5))...), 0, true, ""},
		// 10 live: 4 on-demand, 6 spot; the completed on-demand pods do
		// not count.
		{"completed pods left out", append(append(records("batch", "od", 4), records("batch", "spot", 6)...), done(records("batch", "od", 7))...), 10, true,
			"karpenter.sh/capacity-type=on-demand: 4 (ideal 4.00)"},
		// Pods not decided yet are not counted: 4 bound on spot of 4 is off.
		{"pending pods left out", append(records("batch", "", 6), records("batch", "spot", 4)...), 4, false,
			"karpenter.sh/capacity-type=spot: 4 (ideal 1.50)"},
		// Decided but not bound yet: counted by the decision's group, as
		// apportion counts them: 2 on-demand decided, 2 bound, 6 spot.
		{"decided pods counted by their group", append(append(decided(records("batch", "", 2), "karpenter.sh/capacity-type=on-demand"), records("batch", "od", 2)...), records("batch", "spot", 6)...), 10, true,
			"karpenter.sh/capacity-type=on-demand: 4 (ideal 4.00)"},
		{"completed spot pods leave too many on-demand", append(append(records("batch", "od", 4), records("batch", "spot", 1)...), done(records("batch", "spot", 5))...), 5, false,
			"karpenter.sh/capacity-type=on-demand: 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := checkSample(w, tc.recs, testNodes)
			if s.Live != tc.live || s.Split.Within != tc.within {
				t.Errorf("live %d within %v, want %d %v: %s", s.Live, s.Split.Within, tc.live, tc.within, s.Split.describe())
			}
			if !strings.Contains(s.Split.describe(), tc.counts) {
				t.Errorf("describe() = %q, want it to contain %q", s.Split.describe(), tc.counts)
			}
		})
	}
}

func TestSamples(t *testing.T) {
	w := workload{name: "batch", strategy: capacitySpread}
	var ss samples
	for i, recs := range [][]podRecord{
		nil,
		append(records("batch", "od", 4), records("batch", "spot", 6)...),
		records("batch", "spot", 4), // 4 on spot, ideal 2.5 on-demand: 2.5 off
		records("batch", "od", 4),   // 4 on-demand, ideal 2.5: 1.5 off
	} {
		s := checkSample(w, recs, testNodes)
		s.AfterSeconds = float64(i)
		ss.add(s)
	}
	if ss.Taken != 4 || ss.Within != 2 {
		t.Errorf("%d of %d within quota, want 2 of 4", ss.Within, ss.Taken)
	}
	if ss.Worst == nil || ss.Worst.AfterSeconds != 2 || ss.Worst.Split.Deviation != 2.5 {
		t.Errorf("worst = %+v, want the sample after 2 s (deviation 2.5)", ss.Worst)
	}
	if errs := batchVerdict(&batchResult{Completed: true, Samples: ss}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "2 of 4 samples") {
		t.Errorf("verdict %v, want 2 of 4 samples off quota", errs)
	}
	if errs := batchVerdict(&batchResult{Pods: 10, Succeeded: 9, Samples: samples{Taken: 3, Within: 3}}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "did not complete") {
		t.Errorf("verdict %v, want the Job not complete", errs)
	}
	if errs := batchVerdict(&batchResult{Completed: true, Samples: samples{Taken: 3, Within: 3}}); len(errs) != 0 {
		t.Errorf("verdict %v, want none", errs)
	}
}

func TestRecordDone(t *testing.T) {
	for phase, want := range map[corev1.PodPhase]bool{
		corev1.PodRunning: false, corev1.PodSucceeded: true, corev1.PodFailed: true,
	} {
		var r podRecord
		r.update(&corev1.Pod{Spec: corev1.PodSpec{NodeName: "od"}, Status: corev1.PodStatus{Phase: phase}}, time.Now())
		if r.done != want {
			t.Errorf("%s: done %v, want %v", phase, r.done, want)
		}
	}
}
