package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// The pinned burst places each workload by hand: one Deployment per group,
// with the group's labels as nodeSelector and distinct selectors, the
// counts adding up to the replicas and matching the quota the split check
// holds apportion to, and no strategy for apportion to act on.
func TestPinnedDeployments(t *testing.T) {
	for i, w := range workloads(len(strategies)) {
		for _, replicas := range []int{1, 7, 100} {
			ds, err := pinnedDeployments("ns", "img", w, replicas, false)
			if err != nil {
				t.Fatal(err)
			}
			var total int32
			selectors := map[string]bool{}
			recs := []podRecord{}
			nodes := map[string]map[string]string{}
			for _, d := range ds {
				if _, ok := d.Annotations[annotations.Strategy]; ok {
					t.Errorf("%s carries the strategy", d.Name)
				}
				if d.Spec.Template.Labels["app"] != w.name {
					t.Errorf("%s: app label %q, want %q", d.Name, d.Spec.Template.Labels["app"], w.name)
				}
				sel := d.Spec.Selector.MatchLabels[groupLabel]
				if selectors[sel] {
					t.Errorf("workload %d: two Deployments select group %q", i, sel)
				}
				selectors[sel] = true
				total += *d.Spec.Replicas
				nodes[d.Name] = d.Spec.Template.Spec.NodeSelector
				for range *d.Spec.Replicas {
					recs = append(recs, podRecord{workload: w.name, node: d.Name})
				}
			}
			if int(total) != replicas {
				t.Errorf("%s at %d: the Deployments hold %d pods", w.name, replicas, total)
			}
			if sp := checkSplit(w, recs, nodes); !sp.Within {
				t.Errorf("%s at %d: pinned split %v is off the quota", w.name, replicas, sp.Counts)
			}
		}
	}
}

// With --pinned-gated the pinned pods are held by the bench's gate, which
// the releaser removes (once per pod, and only from pods holding it).
func TestPinnedGated(t *testing.T) {
	ds, err := pinnedDeployments("ns", "img", workloads(1)[0], 10, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if gates := d.Spec.Template.Spec.SchedulingGates; len(gates) != 1 || gates[0].Name != holdGate {
			t.Errorf("%s: gates %v, want only %s", d.Name, gates, holdGate)
		}
	}
	r := newReleaser(nil)
	held := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Spec: ds[0].Spec.Template.Spec}
	r.observe(held)
	r.observe(held)
	r.observe(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}})
	if n := len(r.queue); n != 1 {
		t.Errorf("%d pods queued, want the held one once", n)
	}
}
