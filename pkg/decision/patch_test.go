package decision

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// applyPatch applies p (a merge patch) to pod's JSON as the API server does
// and returns the result.
func applyPatch(t *testing.T, pod *corev1.Pod, p client.Patch, obj client.Object) *corev1.Pod {
	t.Helper()
	if p.Type() != types.MergePatchType {
		t.Fatalf("patch type %s, want %s", p.Type(), types.MergePatchType)
	}
	data, err := p.Data(obj)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := jsonpatch.MergePatch(doc, data)
	if err != nil {
		t.Fatalf("merge patch %s: %v", data, err)
	}
	var out corev1.Pod
	if err := json.Unmarshal(merged, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// userPod is a gated pod carrying what users write next to apportion's
// fields: a required term with alternatives, a pod affinity, a toleration,
// another gate, annotations of their own and forged decision keys.
func userPod(terms int, podAffinity, tolerate, otherGate bool, forged string) *corev1.Pod {
	pod := gatedPod()
	pod.ResourceVersion = "41"
	pod.Annotations = map[string]string{"team": "web", annotations.Group: forged}
	if forged == "" {
		delete(pod.Annotations, annotations.Group)
	}
	if terms > 0 || podAffinity {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if terms > 0 {
		sel := &corev1.NodeSelector{}
		for i := range terms {
			sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", strings.Repeat("z", i+1))}})
		}
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: sel}
	}
	if podAffinity {
		pod.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 5, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname"}}}}
	}
	if tolerate {
		// Room to grow in place, as a decoded list may have: a copy that
		// shared it would add the decision's tolerations to this pod's.
		pod.Spec.Tolerations = append(make([]corev1.Toleration, 0, 4),
			corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "web", Effect: corev1.TaintEffectNoSchedule})
	}
	if otherGate {
		pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "example.com/other"})
	}
	return pod
}

// FuzzPatch: for any pod users write and any decision (required or
// preferred, with a NodePool's tolerations, architecture labels, a deletion
// cost), the patch Patch builds turns the pod into exactly what Apply made
// of it, as controller-runtime's diff of the two pods does; with the lock it
// carries the pod's resourceVersion. The same for the gate's removal alone
// (Release) and for a shadow decision.
func FuzzPatch(f *testing.F) {
	f.Add(uint8(0), false, false, false, "", "spot", "spot-amd64", false, false, true, int16(-3))
	f.Add(uint8(2), true, true, true, "forged", "on-demand", "", true, true, false, int16(7))
	f.Add(uint8(1), false, true, false, "x", "", "", false, false, false, int16(0))
	f.Fuzz(func(t *testing.T, terms uint8, podAffinity, tolerate, otherGate bool, forged, value, nodePool string, preferred, archOnly, withCost bool, cost int16) {
		orig := userPod(int(terms%4), podAffinity, tolerate, otherGate, forged)
		d := Decision{
			Group:            strategy.Group{Labels: []strategy.Label{{Key: "karpenter.sh/capacity-type", Value: value}}, Weight: 1},
			NodePool:         nodePool,
			Preferred:        preferred,
			ArchitectureOnly: archOnly,
			Architectures:    []string{"arm64"},
			Record:           Record{Strategy: "h", Counts: []int64{1, 2}, Reason: "fuzz"},
			Signature:        "sig",
		}
		if nodePool != "" {
			d.Tolerations = []corev1.Toleration{{Key: "pool", Operator: corev1.TolerationOpEqual, Value: nodePool, Effect: corev1.TaintEffectNoSchedule}}
			d.NodeLabels = map[string]string{"karpenter.sh/nodepool-class": nodePool}
		}
		if withCost {
			c := int(cost)
			d.DeletionCost = &c
		}
		cases := map[string]func(*corev1.Pod){
			"decision": func(p *corev1.Pod) { Apply(p, d) },
			"release":  RemoveGate,
			"shadow": func(p *corev1.Pod) {
				WriteShadow(p, ShadowOf(d))
				RemoveGate(p)
			},
		}
		for name, change := range cases {
			before := orig.DeepCopy()
			patched := Editable(orig)
			change(patched)
			if !equality.Semantic.DeepEqual(orig, before) {
				t.Fatalf("%s: changing Editable's copy changed the pod:\n%+v\nwas\n%+v", name, orig, before)
			}
			for _, lock := range []bool{true, false} {
				p, err := Patch(orig, patched, lock)
				if err != nil {
					t.Fatal(err)
				}
				got := applyPatch(t, orig, p, patched)
				// What the API server holds: patched as JSON (which
				// replaces invalid UTF-8, as a fuzzed value may hold).
				want := applyPatch(t, patched, client.RawPatch(types.MergePatchType, []byte("{}")), patched)
				if !equality.Semantic.DeepEqual(got, want) {
					data, _ := p.Data(patched)
					t.Fatalf("%s: the patch %s makes\n%+v\nwant\n%+v", name, data, got.Spec, want.Spec)
				}
				from := client.MergeFrom(orig)
				if lock {
					from = client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
				}
				if byDiff := applyPatch(t, orig, from, patched); !equality.Semantic.DeepEqual(got, byDiff) {
					t.Fatalf("%s: the patch and controller-runtime's diff disagree", name)
				}
				data, _ := p.Data(patched)
				var meta struct {
					Metadata struct {
						ResourceVersion *string `json:"resourceVersion"`
					} `json:"metadata"`
				}
				if err := json.Unmarshal(data, &meta); err != nil {
					t.Fatal(err)
				}
				if hasRV := meta.Metadata.ResourceVersion != nil && *meta.Metadata.ResourceVersion == orig.ResourceVersion; hasRV != lock {
					t.Fatalf("%s: lock %v, the patch %s carries the resourceVersion: %v", name, lock, data, hasRV)
				}
			}
		}
	})
}

// BenchmarkPatch: the decision's patch built from the four fields it
// changes (Patch) against controller-runtime's diff of the two pods
// (client.MergeFrom), for a pod with a user's affinity and toleration.
func BenchmarkPatch(b *testing.B) {
	orig := userPod(2, true, true, true, "")
	for i := range 3 {
		orig.Spec.Containers = append(orig.Spec.Containers, corev1.Container{Name: strings.Repeat("c", i+1), Image: "registry.example/app:1",
			Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}})
	}
	d := Decision{
		Group:        strategy.Group{Labels: []strategy.Label{{Key: "karpenter.sh/capacity-type", Value: "spot"}}, Weight: 1},
		NodePool:     "spot-amd64",
		Record:       Record{Strategy: "h", Counts: []int64{1, 2}, Reason: "quota"},
		Signature:    "sig",
		DeletionCost: new(int),
	}
	patched := orig.DeepCopy()
	Apply(patched, d)
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		var data []byte
		for b.Loop() {
			p, err := Patch(orig, patched, true)
			if err != nil {
				b.Fatal(err)
			}
			if data, err = p.Data(patched); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(data)), "bytes/patch")
	})
	b.Run("diff", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}).Data(patched); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEditableCopiesAreIndependent: two copies of one cached pod, each
// given its own decision, hold only their own decision's tolerations, even
// when the pod's list has room to grow in place.
func TestEditableCopiesAreIndependent(t *testing.T) {
	orig := userPod(1, false, true, true, "")
	tolerating := func(v string) Decision {
		return Decision{Group: strategy.Group{Labels: []strategy.Label{{Key: "pool", Value: v}}, Weight: 1}, NodePool: v,
			Tolerations: []corev1.Toleration{{Key: "pool", Operator: corev1.TolerationOpEqual, Value: v, Effect: corev1.TaintEffectNoSchedule}}}
	}
	a, b := Editable(orig), Editable(orig)
	Apply(a, tolerating("a"))
	Apply(b, tolerating("b"))
	for name, p := range map[string]*corev1.Pod{"a": a, "b": b} {
		if got := p.Spec.Tolerations[len(p.Spec.Tolerations)-1].Value; got != name {
			t.Errorf("copy %s tolerates pool %s, want %s", name, got, name)
		}
	}
}
