package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestProgressCountsWhatKarpenterSees: a pod counts as unschedulable while
// it is unbound and the scheduler marked it so (what Karpenter provisions
// for), not while it is only gated or once it is bound.
func TestProgressCountsWhatKarpenterSees(t *testing.T) {
	condition := func(reason string) []corev1.PodCondition {
		return []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason}}
	}
	pod := func(name, node string, conds []corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: name},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Conditions: conds}}
	}
	w := &podWatch{pods: map[string]map[string]*podRecord{}}
	w.observe(pod("gated", "", condition(corev1.PodReasonSchedulingGated)), false)
	w.observe(pod("marked", "", condition(corev1.PodReasonUnschedulable)), false)
	w.observe(pod("bound", "", condition(corev1.PodReasonUnschedulable)), false)
	w.observe(pod("bound", "n1", condition(corev1.PodReasonUnschedulable)), false)
	w.observe(pod("new", "", nil), false)
	if got := w.progress("b"); got.marked != 1 || got.bound != 1 || got.pods != 4 {
		t.Errorf("progress %+v, want 4 pods, 1 marked unschedulable, 1 bound", got)
	}
	w.observe(pod("marked", "", condition(corev1.PodReasonSchedulingGated)), false)
	if got := w.progress("b").marked; got != 0 {
		t.Errorf("%d marked after the mark went, want 0", got)
	}
}
