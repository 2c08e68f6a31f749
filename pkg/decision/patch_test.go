package decision

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
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

// placedPod is a Deployment's pod as the API server holds it once placed
// (the scale benchmark's kind): its service account token volume, the
// default tolerations, the controller-manager's and apportion's managed
// fields, a scheduled and running status.
func placedPod() *corev1.Pod {
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "bench-with", Name: "bench-17-7d9f8b6c5d-x2x9q", UID: "5f0c3a52-6f4e-4d0b-9d5e-1a2b3c4d5e6f",
		ResourceVersion: "123456", Labels: map[string]string{"app": "bench-17", "pod-template-hash": "7d9f8b6c5d", "bench.apportion.dev/pod": "true"}}, Gated: true})
	pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "127.0.0.1:5000/bench/app:1",
		Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x2x9q", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-x2x9q", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
	}}}}}
	pod.Spec.Tolerations = []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
	}
	Apply(pod, Decision{
		Group: strategy.Group{Labels: []strategy.Label{{Key: "karpenter.sh/capacity-type", Value: "spot"}}, Weight: 3}, NodePool: "spot-amd64",
		Architectures: []string{"amd64", "arm64"}, DeletionCost: ptr.To(-37), Signature: strings.Repeat("s", 43),
		Record: Record{Strategy: "0123456789ab", Revision: "7d9f8b6c5d", Counts: []int64{2, 41}, Reason: "quota"},
	})
	fields := func(manager, raw string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(raw)}
	}
	pod.ManagedFields = []metav1.ManagedFieldsEntry{
		fields("kube-controller-manager", `{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"1\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{},"f:resources":{".":{},"f:requests":{".":{},"f:cpu":{},"f:memory":{}}}}},"f:schedulingGates":{".":{},"k:{\"name\":\"apportion.dev/placement\"}":{".":{},"f:name":{}}}}}`),
		fields("apportion", `{"f:metadata":{"f:annotations":{".":{},"f:apportion.dev/architectures":{},"f:apportion.dev/decision":{},"f:apportion.dev/group":{},"f:apportion.dev/nodepool":{},"f:apportion.dev/signature":{},"f:controller.kubernetes.io/pod-deletion-cost":{}}},"f:spec":{"f:affinity":{".":{},"f:nodeAffinity":{".":{},"f:requiredDuringSchedulingIgnoredDuringExecution":{}}}}}`),
		fields("kwok", `{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:startTime":{}}}`),
	}
	pod.Spec.NodeName = "spot-amd64-x7k2p"
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.0.0.7", PodIP: "10.0.0.7", Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
	}, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Image: "127.0.0.1:5000/bench/app:1", ImageID: "sha256:" + strings.Repeat("0", 64)}}}
	return pod
}

// BenchmarkPatchResponse: what the client decodes of the API server's
// answer to a decision's patch (protobuf, as the client asks for built-in
// types): the whole pod, as a patch sent with the pod asked for, or its
// metadata only, as Write asks for. Reports the answer's bytes.
func BenchmarkPatchResponse(b *testing.B) {
	pod := placedPod()
	whole, err := pod.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	meta, err := (&metav1.PartialObjectMetadata{ObjectMeta: pod.ObjectMeta}).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("pod", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got corev1.Pod
			if err := got.Unmarshal(whole); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(whole)), "bytes/answer")
	})
	b.Run("metadata", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got metav1.PartialObjectMetadata
			if err := got.Unmarshal(meta); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(meta)), "bytes/answer")
	})
}

// BenchmarkPatchPlacedPod: the decision's patch of the scale benchmark's
// kind of pod (no affinity or toleration of the user's), and its bytes.
func BenchmarkPatchPlacedPod(b *testing.B) {
	placed := placedPod()
	orig := placed.DeepCopy()
	orig.Spec.Affinity, orig.Annotations = nil, nil
	orig.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
	b.ReportAllocs()
	var data []byte
	for b.Loop() {
		p, err := Patch(orig, placed, true)
		if err != nil {
			b.Fatal(err)
		}
		if data, err = p.Data(placed); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(data)), "bytes/patch")
}

// BenchmarkCopyForDecision: the copy a decision is applied to, of a gated
// pod as the API server holds it: the pod's DeepCopy against Editable.
func BenchmarkCopyForDecision(b *testing.B) {
	pod := placedPod()
	pod.Annotations, pod.Spec.Affinity, pod.Spec.NodeName, pod.Status = nil, nil, "", corev1.PodStatus{Phase: corev1.PodPending}
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
	d := Decision{Group: strategy.Group{Labels: []strategy.Label{{Key: "karpenter.sh/capacity-type", Value: "spot"}}, Weight: 3}, NodePool: "spot-amd64",
		Architectures: []string{"amd64", "arm64"}, Record: Record{Strategy: "0123456789ab", Counts: []int64{2, 41}, Reason: "quota"}}
	for name, copyOf := range map[string]func(*corev1.Pod) *corev1.Pod{"DeepCopy": (*corev1.Pod).DeepCopy, "Editable": Editable} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Apply(copyOf(pod), d)
			}
		})
	}
}
