package placement_test

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/test"
)

var gravitonToleration = corev1.Toleration{Key: "arch", Operator: corev1.TolerationOpEqual, Value: "arm64", Effect: corev1.TaintEffectNoSchedule}

// nodeLabelFixture is the fixture in node-label mode (no NodePool), with
// an amd64 and an arm64 node, images that run on both, and a rule for
// arm64: a toleration and the label node-group=graviton.
func nodeLabelFixture(t *testing.T, deployAnnotations map[string]string) *fixture {
	t.Helper()
	optedIn := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{annotations.Architectures: "auto"}}}
	f := newFixture(t, deployAnnotations, optedIn,
		test.Node("x86", map[string]string{corev1.LabelArchStable: "amd64"}),
		test.Node("graviton", map[string]string{corev1.LabelArchStable: "arm64", "node-group": "graviton"}))
	rules := decision.ArchitectureRules{"arm64": {TaintsToTolerate: []corev1.Toleration{gravitonToleration}, RequireNodeLabels: decision.NodeLabels{"node-group": "graviton"}}}
	f.ctrl = placement.NewController(f.clock, f.client, f.recorder, &capacity.NodeLabelCapacity{Reader: f.client}, f.tally, 30*time.Second).
		WithImages(&fakeImages{res: result("example.com/multi:1", "amd64", "arm64")}, time.Second).WithArchitectureRules(rules)
	return f
}

func requiredTerms(pod *corev1.Pod) []corev1.NodeSelectorTerm {
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil || pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	return pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
}

func in(key string, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
}

// TestArchitectureRulesByGroup: a strategy with an arm64 and an amd64
// group. The arm64 group's pods gain the arm64 rule; the amd64 group's pods,
// whose decision allows amd64 only, gain nothing, though their images also
// run on arm64.
func TestArchitectureRulesByGroup(t *testing.T) {
	f := nodeLabelFixture(t, map[string]string{annotations.Strategy: "kubernetes.io/arch=arm64,weight=1:kubernetes.io/arch=amd64,weight=1"})
	byGroup := map[string]*corev1.Pod{}
	for i := range 2 {
		pod := f.reconcile(t, f.gatedPod(t, i))
		byGroup[pod.Annotations[annotations.Group]] = pod
	}
	arm, amd := byGroup["kubernetes.io/arch=arm64"], byGroup["kubernetes.io/arch=amd64"]
	if arm == nil || amd == nil {
		t.Fatalf("groups %v: want one pod in each", byGroup)
	}
	wantArm := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		in(corev1.LabelArchStable, "arm64"), in(corev1.LabelArchStable, "arm64"), in("node-group", "graviton")}}}
	if got := requiredTerms(arm); !reflect.DeepEqual(got, wantArm) {
		t.Errorf("arm64 pod: terms %+v, want %+v", got, wantArm)
	}
	if !reflect.DeepEqual(arm.Spec.Tolerations, []corev1.Toleration{gravitonToleration}) {
		t.Errorf("arm64 pod: tolerations %+v, want the arm64 rule's", arm.Spec.Tolerations)
	}
	wantAmd := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		in(corev1.LabelArchStable, "amd64"), in(corev1.LabelArchStable, "amd64")}}}
	if got := requiredTerms(amd); !reflect.DeepEqual(got, wantAmd) || len(amd.Spec.Tolerations) != 0 {
		t.Errorf("amd64 pod: terms %+v tolerations %+v, want no arm64 rule", got, amd.Spec.Tolerations)
	}
}

// TestArchitectureRulesArchitectureOnly: a pod placed by architecture alone
// whose images run on amd64 and arm64 gains the arm64 rule, and a pod that
// already requires the label and tolerates the taint keeps one of each.
func TestArchitectureRulesArchitectureOnly(t *testing.T) {
	f := nodeLabelFixture(t, nil)
	pod := f.reconcile(t, f.gatedPod(t, 0))
	want := []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{in(corev1.LabelArchStable, "amd64", "arm64"), in("node-group", "graviton")}}}
	if got := requiredTerms(pod); !reflect.DeepEqual(got, want) || !reflect.DeepEqual(pod.Spec.Tolerations, []corev1.Toleration{gravitonToleration}) {
		t.Fatalf("terms %+v tolerations %+v, want %+v and the arm64 toleration", got, pod.Spec.Tolerations, want)
	}

	held := f.reconcile(t, f.gatedPod(t, 1, func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "arch", Value: "arm64", Effect: corev1.TaintEffectNoSchedule}}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{in("node-group", "graviton")}}}}}}
	}))
	want = []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{in("node-group", "graviton"), in(corev1.LabelArchStable, "amd64", "arm64")}}}
	if got := requiredTerms(held); !reflect.DeepEqual(got, want) || len(held.Spec.Tolerations) != 1 {
		t.Fatalf("terms %+v tolerations %+v: want %+v and the pod's own toleration alone", got, held.Spec.Tolerations, want)
	}
}
