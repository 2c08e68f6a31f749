package main

import (
	"testing"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// The pinned burst places each workload by hand: one Deployment per group,
// with the group's labels as nodeSelector and distinct selectors, the
// counts adding up to the replicas and matching the quota the split check
// holds apportion to, and no strategy for apportion to act on.
func TestPinnedDeployments(t *testing.T) {
	for i, w := range workloads(len(strategies)) {
		for _, replicas := range []int{1, 7, 100} {
			ds, err := pinnedDeployments("ns", "img", w, replicas)
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
