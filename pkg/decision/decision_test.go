package decision

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
)

func req(key string, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
}

var spot = strategy.Group{Labels: []strategy.Label{{Key: "karpenter.sh/capacity-type", Value: "spot"}}, Weight: 3}

func gatedPod() *corev1.Pod {
	return test.Pod(test.PodOptions{Gates: []string{"other"}, Gated: true})
}

func TestApplyRequiredWithoutUserAffinity(t *testing.T) {
	pod := gatedPod()
	Apply(pod, Decision{Group: spot, NodePool: "spot-amd64", Architectures: []string{"amd64", "arm64"},
		Record: Record{Strategy: "abc", Revision: "rev1", Counts: []int64{2, 1}, Reason: "quota"}})
	want := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		req("karpenter.sh/capacity-type", "spot"), req("kubernetes.io/arch", "amd64", "arm64"), req("karpenter.sh/nodepool", "spot-amd64"),
	}}}
	if got := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; !reflect.DeepEqual(got, want) {
		t.Errorf("terms = %+v, want %+v", got, want)
	}
	if HasGate(pod) || len(pod.Spec.SchedulingGates) != 1 || pod.Spec.SchedulingGates[0].Name != "other" {
		t.Errorf("gates = %+v, want only the other gate", pod.Spec.SchedulingGates)
	}
	if pod.Annotations[annotations.Group] != "karpenter.sh/capacity-type=spot" || pod.Annotations[annotations.NodePool] != "spot-amd64" ||
		pod.Annotations[annotations.Architectures] != "amd64,arm64" || !Decided(pod) {
		t.Errorf("annotations = %v", pod.Annotations)
	}
	var rec Record
	if err := json.Unmarshal([]byte(pod.Annotations[annotations.Decision]), &rec); err != nil || rec.Revision != "rev1" || len(rec.Counts) != 2 {
		t.Errorf("decision record %q: %v", pod.Annotations[annotations.Decision], err)
	}
}

func TestApplyANDsIntoEveryUserTerm(t *testing.T) {
	pod := gatedPod()
	userTerms := []corev1.NodeSelectorTerm{
		{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", "a")}},
		{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", "b")}, MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", "n1")}},
	}
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: userTerms}}}
	pod.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	Apply(pod, Decision{Group: spot})
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 2 {
		t.Fatalf("%d terms, want the user's 2", len(terms))
	}
	for i, term := range terms {
		if len(term.MatchExpressions) != 2 || term.MatchExpressions[0].Values[0] != []string{"a", "b"}[i] || term.MatchExpressions[1].Values[0] != "spot" {
			t.Errorf("term %d = %+v: want the user's expression then the group's", i, term)
		}
	}
	if len(terms[1].MatchFields) != 1 || pod.Spec.NodeSelector["disk"] != "ssd" {
		t.Errorf("user constraints changed: %+v %v", terms[1], pod.Spec.NodeSelector)
	}
}

func TestApplyPreferredAndTolerations(t *testing.T) {
	pod := gatedPod()
	existing := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	pod.Spec.Tolerations = []corev1.Toleration{existing}
	added := corev1.Toleration{Key: "spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	Apply(pod, Decision{Group: spot, NodePool: "p", Preferred: true, Tolerations: []corev1.Toleration{existing, added}})
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		t.Errorf("preferred mode wrote required terms")
	}
	if len(na.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || na.PreferredDuringSchedulingIgnoredDuringExecution[0].Weight != PreferredWeight {
		t.Errorf("preferred = %+v", na.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	if !reflect.DeepEqual(pod.Spec.Tolerations, []corev1.Toleration{existing, added}) {
		t.Errorf("tolerations = %+v, want the existing one once and the added one", pod.Spec.Tolerations)
	}
}

// TestApplyPreferredKeepsArchitecturesRequired: in preferred mode the group
// and the NodePool are a preference, but a pod on an architecture its images
// lack cannot start, so the architectures stay required.
func TestApplyPreferredKeepsArchitecturesRequired(t *testing.T) {
	pod := gatedPod()
	Apply(pod, Decision{Group: spot, NodePool: "p", Preferred: true, Architectures: []string{"arm64"}})
	na := pod.Spec.Affinity.NodeAffinity
	req := na.RequiredDuringSchedulingIgnoredDuringExecution
	if req == nil || len(req.NodeSelectorTerms) != 1 || !reflect.DeepEqual(req.NodeSelectorTerms[0].MatchExpressions,
		[]corev1.NodeSelectorRequirement{{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}}) {
		t.Fatalf("required = %+v, want the architecture alone", req)
	}
	pref := na.PreferredDuringSchedulingIgnoredDuringExecution
	if len(pref) != 1 || len(pref[0].Preference.MatchExpressions) != 2 {
		t.Fatalf("preferred = %+v, want the group's label and the NodePool", pref)
	}
}

// TestApplyArchitectureOnly: no group annotation, no group labels; the
// architectures and the NodePool are required and recorded.
func TestApplyArchitectureOnly(t *testing.T) {
	pod := gatedPod()
	Apply(pod, Decision{ArchitectureOnly: true, NodePool: "od-arm64", Architectures: []string{"arm64"}, Record: Record{Reason: "architecture"}})
	if _, ok := pod.Annotations[annotations.Group]; ok || HasGate(pod) {
		t.Fatalf("annotations %v, gates %v: want no group and no gate", pod.Annotations, pod.Spec.SchedulingGates)
	}
	if pod.Annotations[annotations.Architectures] != "arm64" || pod.Annotations[annotations.NodePool] != "od-arm64" {
		t.Errorf("annotations = %v", pod.Annotations)
	}
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 || terms[0].MatchExpressions[0].Key != corev1.LabelArchStable {
		t.Errorf("terms = %+v, want arch then nodepool", terms)
	}
}

func TestStrategyHashStable(t *testing.T) {
	a, _ := strategy.Parse("a=b,weight=1:c=d,weight=2")
	b, _ := strategy.Parse(" a = b , weight=1 : c=d,weight=2")
	c, _ := strategy.Parse("a=b,weight=2:c=d,weight=1")
	if StrategyHash(a) != StrategyHash(b) || StrategyHash(a) == StrategyHash(c) || len(StrategyHash(a)) != 12 {
		t.Errorf("hashes %s %s %s", StrategyHash(a), StrategyHash(b), StrategyHash(c))
	}
}
