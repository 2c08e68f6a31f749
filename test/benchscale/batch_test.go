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

// gone marks recs deleted.
func gone(recs []podRecord) []podRecord {
	for i := range recs {
		recs[i].gone = true
	}
	return recs
}

func decided(recs []podRecord, group string) []podRecord {
	for i := range recs {
		recs[i].group = group
	}
	return recs
}

// A Job of 10 at a time: base 2 on-demand, the rest 1:3, so at 10 live pods
// 4 on-demand and 6 spot.
const parallelism, completions = 10, 100

func TestCheckSample(t *testing.T) {
	w := workload{name: "batch", strategy: capacitySpread}
	for _, tc := range []struct {
		name        string
		recs        []podRecord
		completions int
		live        int
		held        bool
		off         int64
		why         string
	}{
		{"no live pods", append(records("batch", "", 3), done(records("batch", "od", 5))...), completions, 0, false, 0, ""},
		// 10 live: 4 on-demand, 6 spot; the completed on-demand pods do
		// not count.
		{"completed pods left out", append(append(records("batch", "od", 4), records("batch", "spot", 6)...), done(records("batch", "od", 7))...), completions, 10, true, 0, ""},
		{"deleted pods left out", append(append(records("batch", "od", 4), records("batch", "spot", 6)...), gone(records("batch", "spot", 3))...), completions, 10, true, 0, ""},
		{"at parallelism, one too many on-demand", append(records("batch", "od", 5), records("batch", "spot", 5)...), completions, 10, true, 1,
			"karpenter.sh/capacity-type=on-demand: 5, quota 4..4 of 10; karpenter.sh/capacity-type=spot: 5, quota 6..6 of 10"},
		// Pods not decided yet are not counted: 4 live, all spot, short
		// of on-demand pods the next decisions add.
		{"fewer live, short of a group", append(records("batch", "", 6), records("batch", "spot", 4)...), completions, 4, true, 0, ""},
		{"fewer live, spot above its quota at parallelism", records("batch", "spot", 7), completions, 7, true, 1,
			"karpenter.sh/capacity-type=spot: 7, more than 6 of 10"},
		{"completed spot pods leave too many on-demand", append(append(records("batch", "od", 5), records("batch", "spot", 1)...), done(records("batch", "spot", 4))...), completions, 6, true, 1,
			"karpenter.sh/capacity-type=on-demand: 5, more than 4 of 10"},
		{"fewer live, a pod in no group", append(records("batch", "od", 2), records("batch", "gpu", 1)...), completions, 3, true, 1, "(no group): 1"},
		// Decided but not bound yet: counted by the decision's group, as
		// apportion counts them: 3 on-demand decided and 2 bound make one
		// too many at parallelism.
		{"decided pods counted by their group", append(append(decided(records("batch", "", 3), "karpenter.sh/capacity-type=on-demand"), records("batch", "od", 2)...), records("batch", "spot", 5)...), completions, 10, true, 1,
			"karpenter.sh/capacity-type=on-demand: 5, quota 4..4 of 10; karpenter.sh/capacity-type=spot: 5, quota 6..6 of 10"},
		// Every pod of the Job placed: the 5 on-demand left are not held
		// to the quota, no pod comes to correct them.
		{"after the last pod is placed", append(append(records("batch", "od", 5), records("batch", "spot", 1)...), done(records("batch", "spot", 14))...), 20, 6, false, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := checkSample(w, tc.recs, testNodes, parallelism, tc.completions)
			if s.Live != tc.live || s.Held != tc.held || s.PodsOff != tc.off || s.Split.Within != (tc.off == 0) {
				t.Errorf("live %d held %v off %d within %v, want %d %v %d: %s", s.Live, s.Held, s.PodsOff, s.Split.Within, tc.live, tc.held, tc.off, s.Why)
			}
			if tc.why != "" && s.Why != tc.why {
				t.Errorf("why %q, want %q", s.Why, tc.why)
			}
		})
	}
}

func TestSamples(t *testing.T) {
	w := workload{name: "batch", strategy: capacitySpread}
	var ss samples
	for i, recs := range [][]podRecord{
		nil, // not held: nothing live
		append(records("batch", "od", 4), records("batch", "spot", 6)...),
		records("batch", "spot", 4), // fewer live, short of on-demand: within
		records("batch", "spot", 8), // 8 on spot, 6 at most: 2 off
		records("batch", "od", 5),   // 5 on-demand, 4 at most: 1 off
	} {
		s := checkSample(w, recs, testNodes, parallelism, completions)
		s.AfterSeconds = float64(i)
		ss.add(s, parallelism)
	}
	// Of the held samples only the one at parallelism is within the quota
	// at its own count: 4 spot alone is not.
	if ss.Taken != 5 || ss.Held != 4 || ss.Full != 1 || ss.Within != 2 || ss.AtCount != 1 || len(ss.Off) != 2 {
		t.Errorf("%d of %d held within quota (%d taken, %d at parallelism, %d within at their count, %d off kept), want 2 of 4 (5, 1, 1, 2)",
			ss.Within, ss.Held, ss.Taken, ss.Full, ss.AtCount, len(ss.Off))
	}
	if ss.Worst == nil || ss.Worst.AfterSeconds != 3 || ss.Worst.PodsOff != 2 {
		t.Errorf("worst = %+v, want the sample after 3 s (2 pods off)", ss.Worst)
	}
	var within samples
	within.add(checkSample(w, records("batch", "spot", 4), testNodes, parallelism, completions), parallelism)
	if within.Worst != nil || within.Within != 1 {
		t.Errorf("worst = %+v of %d within, want none: no sample was off", within.Worst, within.Within)
	}
	if errs := batchVerdict(&batchResult{Completed: true, Samples: ss}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "2 of 4 samples") {
		t.Errorf("verdict %v, want 2 of 4 samples off quota", errs)
	}
	if errs := batchVerdict(&batchResult{Pods: 10, Succeeded: 9, Samples: samples{Taken: 3, Held: 3, Within: 3}}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "did not complete") {
		t.Errorf("verdict %v, want the Job not complete", errs)
	}
	if errs := batchVerdict(&batchResult{Completed: true, Samples: samples{Taken: 5, Held: 3, Within: 3}}); len(errs) != 0 {
		t.Errorf("verdict %v, want none: the samples not held do not count", errs)
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
