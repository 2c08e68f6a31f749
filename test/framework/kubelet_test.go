package framework

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The stand-in kubelet turns probe results into readiness as the kubelet
// does: failureThreshold failures in a row to lose it, successThreshold
// successes in a row to get it back, a success or failure between resetting
// the count.
func TestReadinessCountsInARow(t *testing.T) {
	r := newReadiness(&corev1.Probe{PeriodSeconds: 2, TimeoutSeconds: 1, FailureThreshold: 2, SuccessThreshold: 2})
	if r.period != 2*time.Second || r.timeout != time.Second {
		t.Fatalf("period %s, timeout %s; want 2s, 1s", r.period, r.timeout)
	}
	steps := []struct {
		ok             bool
		changed, ready bool
	}{
		{false, false, true}, // one failure: still Ready
		{true, false, true},  // a success resets the count
		{false, false, true},
		{false, true, false}, // two in a row: not Ready
		{false, false, false},
		{true, false, false}, // one success of two
		{false, false, false},
		{true, false, false},
		{true, true, true}, // two in a row: Ready again
		{true, false, true},
	}
	for i, s := range steps {
		changed, ready := r.observe(s.ok)
		if changed != s.changed || ready != s.ready {
			t.Fatalf("step %d (probe ok %v): changed %v, ready %v; want %v, %v", i, s.ok, changed, ready, s.changed, s.ready)
		}
	}
}

// Unset fields take the kubelet's defaults: every 10 s, 1 s timeout, 3
// failures, 1 success.
func TestReadinessDefaults(t *testing.T) {
	r := newReadiness(&corev1.Probe{})
	if r.period != 10*time.Second || r.timeout != time.Second || r.failureThreshold != 3 || r.successThreshold != 1 {
		t.Fatalf("got period %s, timeout %s, failures %d, successes %d", r.period, r.timeout, r.failureThreshold, r.successThreshold)
	}
	for range 2 {
		if changed, _ := r.observe(false); changed {
			t.Fatal("not Ready before 3 failures")
		}
	}
	if changed, ready := r.observe(false); !changed || ready {
		t.Fatal("still Ready after 3 failures")
	}
	if changed, ready := r.observe(true); !changed || !ready {
		t.Fatal("not Ready again after 1 success")
	}
}
