package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

func TestTrackerOutcomes(t *testing.T) {
	tr := &tracker{pods: map[types.UID]*podRecord{}, notReadyRemoved: map[string]removal{}}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	gate := []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
	pod := func(uid string, gated bool, group string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Labels: map[string]string{workloadLabel: "Deployment.w", optInLabel: "true"},
			Annotations: map[string]string{}}}
		if gated {
			p.Spec.SchedulingGates = gate
		}
		if group != "" {
			p.Annotations[annotations.Group] = group
		}
		return p
	}
	// Gated, then decided and let go.
	tr.observe(pod("a", true, ""), t0)
	tr.observe(pod("a", false, spot), t0.Add(time.Second))
	// Gated, then let go without a decision (the gate timeout).
	tr.observe(pod("b", true, ""), t0)
	tr.observe(pod("b", false, ""), t0.Add(30*time.Second))
	// Never gated, no decision: failed open.
	tr.observe(pod("c", false, ""), t0)
	// A later event does not change what was seen when it passed.
	tr.observe(pod("c", false, spot), t0.Add(time.Second))
	// Still gated.
	tr.observe(pod("d", true, ""), t0)
	// Deleted while Running and not Ready: the workload is marked.
	gone := pod("e", false, spot)
	gone.Status.Phase = corev1.PodRunning
	gone.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	tr.observe(gone, t0)
	if len(tr.removedNotReady()) != 0 {
		t.Error("a live not-ready pod marked its workload")
	}
	gone = gone.DeepCopy()
	gone.DeletionTimestamp = &metav1.Time{Time: t0}
	tr.observe(gone, t0.Add(time.Minute))
	ready := pod("f", false, spot)
	ready.Status.Phase = corev1.PodRunning
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	ready.Labels[workloadLabel] = "Deployment.v"
	ready.DeletionTimestamp = &metav1.Time{Time: t0}
	tr.observe(ready, t0.Add(time.Minute))
	if got := tr.removedNotReady(); len(got) != 1 || !got["Deployment.w"].at.Equal(t0.Add(time.Minute)) {
		t.Errorf("not-ready removals: %v, want Deployment.w only", got)
	}
	got := map[types.UID]podRecord{}
	for uid, r := range tr.pods {
		got[uid] = *r
	}
	for uid, want := range map[types.UID]outcome{"a": decided, "b": released, "c": failedOpen} {
		if r := got[uid]; r.passed.IsZero() || r.outcome() != want {
			t.Errorf("pod %s: outcome %d (passed %v), want %d", uid, r.outcome(), r.passed, want)
		}
	}
	if !got["d"].passed.IsZero() || !got["d"].gated {
		t.Errorf("pod d, still gated: %+v", got["d"])
	}
	if !got["a"].seen.Equal(t0) || !got["b"].passed.Equal(t0.Add(30*time.Second)) {
		t.Errorf("times: a seen %v, b passed %v", got["a"].seen, got["b"].passed)
	}
}

func TestCount(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	frozen := []window{{From: at(20), To: at(40)}}
	recs := []podRecord{
		{optIn: true, seen: at(1), passed: at(2), gated: true, decided: true},
		{optIn: true, seen: at(3), passed: at(3)},                               // failed open
		{optIn: true, seen: at(4), passed: at(35), gated: true},                 // released
		{optIn: true, seen: at(25), passed: at(25)},                             // failed open while frozen
		{optIn: false, seen: at(5), passed: at(5)},                              // did not opt in: not counted
		{optIn: false, seen: at(6), passed: at(7), gated: true},                 // did not opt in, yet gated
		{optIn: true, seen: at(50), passed: at(70), gated: true, decided: true}, // passed after the span
		{optIn: true, seen: at(-5), passed: at(10), gated: true, decided: true}, // seen before the span
	}
	a := count(recs, t0, at(60), func(t time.Time) bool { return frozenAt(frozen, t) })
	want := admissions{Seen: 7, SeenFrozen: 1, Decided: 2, Undecided: 2, UndecidedFrozen: 1, PlainGated: 1, FailedOpen: 2, Released: 1}
	if a != want {
		t.Errorf("count = %+v, want %+v", a, want)
	}
	if !frozenAt([]window{{From: at(0)}}, at(1000)) || frozenAt(frozen, at(40)) || !frozenAt(frozen, at(20)) {
		t.Error("frozenAt: an open window ends nowhere; a closed one includes its start and excludes its end")
	}
}
