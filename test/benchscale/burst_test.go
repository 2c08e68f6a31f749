package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/test"
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
	r := newReleaser(nil, nil)
	held := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}, Spec: ds[0].Spec.Template.Spec}
	r.observe(held)
	r.observe(held)
	r.observe(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}})
	if n := len(r.queue); n != 1 {
		t.Errorf("%d pods queued, want the held one once", n)
	}
}

// With --pinned-decision each pinned pod is released by one patch that
// writes the decision apportion's placement would: its pinned group, a
// NodePool serving it, the images' architectures (the group's own for an
// architecture group), the counts seen before it, signed; the bench's gate
// is gone.
func TestPinnedDecision(t *testing.T) {
	ctx := context.Background()
	var objs []client.Object
	for _, ct := range []string{"on-demand", "spot"} {
		for _, arch := range imageArchitectures {
			objs = append(objs, test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: ct + "-" + arch}, Ready: metav1.ConditionTrue,
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(karpv1.CapacityTypeLabelKey, ct), test.Requirement(corev1.LabelArchStable, arch)}}))
		}
	}
	ws := workloads(len(strategies))
	d, err := newDecider(ctx, fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).Build(), ws, podSpec("img"), imageArchitectures)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		ds, err := pinnedDeployments("ns", "img", w, 10, true)
		if err != nil {
			t.Fatal(err)
		}
		for g, dep := range ds {
			for i := range 2 {
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("%s-%d", dep.Name, i), UID: types.UID(fmt.Sprintf("%s-%d", dep.Name, i)),
					Labels: map[string]string{"app": w.name, groupLabel: dep.Spec.Template.Labels[groupLabel], "pod-template-hash": "h"}}, Spec: dep.Spec.Template.Spec}
				kube := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod).Build()
				r := newReleaser(kube, d)
				r.release(ctx, pod)
				var got corev1.Pod
				if err := kube.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
					t.Fatal(err)
				}
				v, ok := d.signer.Read(&got)
				switch {
				case r.patched.Load() != 1 || !ok:
					t.Fatalf("%s: released %d, signed decision %v: %v", pod.Name, r.patched.Load(), ok, got.Annotations)
				case len(got.Spec.SchedulingGates) != 0:
					t.Errorf("%s: still gated %v", pod.Name, got.Spec.SchedulingGates)
				}
				group := d.workloads[w.name].strategy.Strategy.Groups[g]
				if v.Group != group.Key() {
					t.Errorf("%s: group %q, want the pinned %q", pod.Name, v.Group, group.Key())
				}
				for _, l := range group.Labels {
					if l.Key == karpv1.CapacityTypeLabelKey && !strings.HasPrefix(v.NodePool, l.Value+"-") {
						t.Errorf("%s: NodePool %q does not serve %s", pod.Name, v.NodePool, group.Key())
					}
					if l.Key == corev1.LabelArchStable && got.Annotations[annotations.Architectures] != l.Value {
						t.Errorf("%s: architectures %q, want the group's %s", pod.Name, got.Annotations[annotations.Architectures], l.Value)
					}
				}
				if want := fmt.Sprintf(`"counts":[%s]`, countsSeen(len(ds), g, i)); !strings.Contains(got.Annotations[annotations.Decision], want) {
					t.Errorf("%s: record %s, want %s", pod.Name, got.Annotations[annotations.Decision], want)
				}
			}
		}
	}
}

// countsSeen is the counts a workload's pod i of group g sees when the
// groups before g each had 2 pods released.
func countsSeen(groups, g, i int) string {
	out := make([]string, groups)
	for k := range out {
		switch {
		case k < g:
			out[k] = "2"
		case k == g:
			out[k] = fmt.Sprint(i)
		default:
			out[k] = "0"
		}
	}
	return strings.Join(out, ",")
}
