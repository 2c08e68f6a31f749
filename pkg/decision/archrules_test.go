package decision

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const armRules = `{"arm64":{"taintsToTolerate":[{"key":"arch","value":"arm64","effect":"NoSchedule"}],"requireNodeLabels":{"node-group":"graviton"}},
"amd64":{"taintsToTolerate":[{"key":"legacy","operator":"Exists","effect":"NoExecute","tolerationSeconds":30}]}}`

var (
	armToleration    = corev1.Toleration{Key: "arch", Value: "arm64", Effect: corev1.TaintEffectNoSchedule}
	thirty           = int64(30)
	legacyToleration = corev1.Toleration{Key: "legacy", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &thirty}
)

func TestParseArchitectureRules(t *testing.T) {
	cases := []struct {
		name, text string
		want       ArchitectureRules
		err        string // a part of the error; empty: valid
	}{
		{name: "empty", text: " "},
		{name: "both architectures", text: armRules, want: ArchitectureRules{
			"arm64": {TaintsToTolerate: []corev1.Toleration{armToleration}, RequireNodeLabels: NodeLabels{"node-group": "graviton"}},
			"amd64": {TaintsToTolerate: []corev1.Toleration{legacyToleration}},
		}},
		{name: "labels as the kube-arch-webhook list", text: `{"arm64":{"requireNodeLabels":[{"kubernetes.io/arch":"arm64"},{"pool":"arm"}]}}`,
			want: ArchitectureRules{"arm64": {RequireNodeLabels: NodeLabels{"kubernetes.io/arch": "arm64", "pool": "arm"}}}},
		{name: "list with a conflict", text: `{"arm64":{"requireNodeLabels":[{"pool":"a"},{"pool":"b"}]}}`, err: `label pool is required as both "a" and "b"`},
		{name: "not JSON", text: `arm64: {}`, err: "not a JSON object"},
		{name: "unknown field", text: `{"arm64":{"tolerations":[]}}`, err: `unknown field "tolerations"`},
		{name: "trailing data", text: `{} {}`, err: "trailing data"},
		{name: "bad architecture", text: `{"arm 64":{}}`, err: `"arm 64" is not an architecture`},
		{name: "bad label key", text: `{"arm64":{"requireNodeLabels":{"a b":"x"}}}`, err: `"a b" is not a label key`},
		{name: "bad label value", text: `{"arm64":{"requireNodeLabels":{"pool":"a b"}}}`, err: `is not a label value`},
		{name: "bad effect", text: `{"arm64":{"taintsToTolerate":[{"key":"k","value":"v","effect":"NoRun"}]}}`, err: "taintsToTolerate[0]: effect must be"},
		{name: "exists with value", text: `{"arm64":{"taintsToTolerate":[{"key":"k","operator":"Exists","value":"v"}]}}`, err: "operator Exists takes no value"},
		{name: "empty key without exists", text: `{"arm64":{"taintsToTolerate":[{"value":"v"}]}}`, err: "an empty key needs operator Exists"},
		{name: "bad operator", text: `{"arm64":{"taintsToTolerate":[{"key":"k","operator":"In"}]}}`, err: "operator must be Equal or Exists"},
		{name: "seconds without NoExecute", text: `{"arm64":{"taintsToTolerate":[{"key":"k","operator":"Exists","effect":"NoSchedule","tolerationSeconds":5}]}}`, err: "tolerationSeconds needs effect NoExecute"},
		{name: "architectures disagree on a label", text: `{"amd64":{"requireNodeLabels":{"pool":"x86"}},"arm64":{"requireNodeLabels":{"pool":"arm"}}}`,
			err: "arm64 requires pool=arm but amd64 requires pool=x86"},
		{name: "architectures agree on a label", text: `{"amd64":{"requireNodeLabels":{"managed":"true"}},"arm64":{"requireNodeLabels":{"managed":"true"}}}`,
			want: ArchitectureRules{"amd64": {RequireNodeLabels: NodeLabels{"managed": "true"}}, "arm64": {RequireNodeLabels: NodeLabels{"managed": "true"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseArchitectureRules(tc.text)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("rules %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestArchitectureRulesFor(t *testing.T) {
	rules, err := ParseArchitectureRules(armRules)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		archs       []string
		tolerations []corev1.Toleration
		labels      map[string]string
	}{
		{name: "no architecture", archs: nil},
		{name: "architecture without a rule", archs: []string{"s390x"}},
		{name: "arm64", archs: []string{"arm64"}, tolerations: []corev1.Toleration{armToleration}, labels: map[string]string{"node-group": "graviton"}},
		{name: "amd64", archs: []string{"amd64"}, tolerations: []corev1.Toleration{legacyToleration}},
		{name: "both", archs: []string{"amd64", "arm64"}, tolerations: []corev1.Toleration{legacyToleration, armToleration}, labels: map[string]string{"node-group": "graviton"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tolerations, labels := rules.For(tc.archs)
			if !reflect.DeepEqual(tolerations, tc.tolerations) || !reflect.DeepEqual(labels, tc.labels) {
				t.Errorf("For(%v) = %+v, %v; want %+v, %v", tc.archs, tolerations, labels, tc.tolerations, tc.labels)
			}
		})
	}
	// The same toleration in two architectures' rules is added once.
	twice := ArchitectureRules{"amd64": {TaintsToTolerate: []corev1.Toleration{legacyToleration}},
		"arm64": {TaintsToTolerate: []corev1.Toleration{{Key: "legacy", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(30))}}}}
	if got, _ := twice.For([]string{"amd64", "arm64"}); len(got) != 1 {
		t.Errorf("tolerations %+v, want the shared one once", got)
	}
}

// TestApplyArchitectureRules: the rules' labels are ANDed into every
// required term, the tolerations added, and what the pod already holds is
// not added again.
func TestApplyArchitectureRules(t *testing.T) {
	graviton := req("node-group", "graviton")
	arch := req("kubernetes.io/arch", "arm64")
	cases := []struct {
		name        string
		pod         func(*corev1.Pod)
		d           Decision
		terms       []corev1.NodeSelectorTerm
		tolerations []corev1.Toleration
	}{
		{
			name:        "no affinity",
			d:           Decision{ArchitectureOnly: true, Architectures: []string{"arm64"}, Tolerations: []corev1.Toleration{armToleration}, NodeLabels: map[string]string{"node-group": "graviton"}},
			terms:       []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{arch, graviton}}},
			tolerations: []corev1.Toleration{armToleration},
		},
		{
			name: "every user term",
			pod: func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", "a")}},
					{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", "b"), graviton}},
				}}}}
			},
			d: Decision{Group: spot, Architectures: []string{"arm64"}, NodeLabels: map[string]string{"node-group": "graviton", "a-first": "yes"}},
			terms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", "a"), req("karpenter.sh/capacity-type", "spot"), arch, req("a-first", "yes"), graviton}},
				// The second term already required node-group=graviton.
				{MatchExpressions: []corev1.NodeSelectorRequirement{req("zone", "b"), graviton, req("karpenter.sh/capacity-type", "spot"), arch, req("a-first", "yes")}},
			},
		},
		{
			name: "held by nodeSelector and tolerations",
			pod: func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{"node-group": "graviton"}
				// Without an operator: the same as Equal.
				p.Spec.Tolerations = []corev1.Toleration{{Key: "arch", Value: "arm64", Effect: corev1.TaintEffectNoSchedule}}
			},
			d: Decision{ArchitectureOnly: true, Architectures: []string{"arm64"},
				Tolerations: []corev1.Toleration{{Key: "arch", Operator: corev1.TolerationOpEqual, Value: "arm64", Effect: corev1.TaintEffectNoSchedule}, legacyToleration},
				NodeLabels:  map[string]string{"node-group": "graviton"}},
			terms:       []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{arch}}},
			tolerations: []corev1.Toleration{armToleration, legacyToleration},
		},
		{
			name:  "preferred mode keeps them required",
			d:     Decision{Group: spot, Preferred: true, Architectures: []string{"arm64"}, NodeLabels: map[string]string{"node-group": "graviton"}},
			terms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{arch, graviton}}},
		},
		{
			name: "a requirement with the values in another order",
			pod: func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{req("node-group", "graviton", "other")}},
				}}}}
			},
			d: Decision{ArchitectureOnly: true, Architectures: []string{"arm64"}, NodeLabels: map[string]string{"node-group": "graviton"}},
			// Not the same requirement: graviton is ANDed in.
			terms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{req("node-group", "graviton", "other"), arch, graviton}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := gatedPod()
			if tc.pod != nil {
				tc.pod(pod)
			}
			Apply(pod, tc.d)
			if got := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; !reflect.DeepEqual(got, tc.terms) {
				t.Errorf("terms = %+v\nwant %+v", got, tc.terms)
			}
			if !reflect.DeepEqual(pod.Spec.Tolerations, tc.tolerations) {
				t.Errorf("tolerations = %+v\nwant %+v", pod.Spec.Tolerations, tc.tolerations)
			}
		})
	}
}

func TestSameRequirement(t *testing.T) {
	if !sameRequirement(req("k", "a", "b"), req("k", "b", "a")) {
		t.Error("the same values in another order: want the same requirement")
	}
	if sameRequirement(req("k", "a"), corev1.NodeSelectorRequirement{Key: "k", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a"}}) {
		t.Error("In and NotIn: want different requirements")
	}
}
