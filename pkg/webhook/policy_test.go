package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/scope"
)

func TestPolicyValidator(t *testing.T) {
	const target = `"target":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"}`
	for _, tc := range []struct {
		name    string
		op      admissionv1.Operation
		obj     string
		allowed bool
		msg     string
	}{
		{"structured", admissionv1.Create, `{"spec":{` + target + `,"strategy":{"groups":[{"labels":{"karpenter.sh/capacity-type":"on-demand"},"base":2,"weight":1},{"labels":{"karpenter.sh/capacity-type":"spot"},"weight":3}]}}}`, true, ""},
		{"text", admissionv1.Update, `{"spec":{` + target + `,"strategy":{"text":"` + good + `"}}}`, true, ""},
		{"distribution (seed 001)", admissionv1.Create, `{"spec":{` + target + `,"distribution":[{"nodeLabel":{"type":"default"},"weight":80},{"nodeLabel":{"type":"spot"},"weight":20}]}}`, true, ""},
		{"text with a bad weight", admissionv1.Create, `{"spec":{` + target + `,"strategy":{"text":"a=b,weight=x"}}}`, false,
			`spec.strategy.text: invalid strategy: group 1, item 2 "weight=x": weight must be a non-negative integer, got "x"`},
		{"groups without weight", admissionv1.Create, `{"spec":{` + target + `,"strategy":{"groups":[{"labels":{"a":"b"}},{"labels":{"c":"d"}}]}}}`, false,
			"spec.strategy.groups: invalid strategy: every group has weight 0"},
		{"group with a bad label key", admissionv1.Create, `{"spec":{` + target + `,"strategy":{"groups":[{"labels":{"a":"b"},"weight":1},{"labels":{"Bad Key":"x"},"weight":1}]}}}`, false,
			`spec.strategy.groups[1]: invalid strategy: group 2, item 1 "Bad Key=x": invalid node label key`},
		{"text with a typo of base", admissionv1.Create, `{"spec":{` + target + `,"strategy":{"text":"a=b,bsae=2,weight=1"}}}`, false,
			`spec.strategy.text: invalid strategy: group 1, item 2 "bsae=2": did you mean "base"?`},
		{"group with a typo of base for a label", admissionv1.Create, `{"spec":{` + target + `,"strategy":{"groups":[{"labels":{"a":"b","bsae":"2"},"weight":1}]}}}`, false,
			`spec.strategy.groups[0].labels["bsae"]: did you mean "base"?`},
		{"group with base for a label", admissionv1.Create, `{"spec":{` + target + `,"strategy":{"groups":[{"labels":{"a":"b","base":"2"},"weight":1}]}}}`, false,
			`spec.strategy.groups[0].labels["base"]: "base" is reserved, not a node label`},
		{"distribution with weight for a label", admissionv1.Create, `{"spec":{` + target + `,"distribution":[{"nodeLabel":{"type":"spot"},"weight":1},{"nodeLabel":{"type":"default","weight":"4"}}]}}`, false,
			`spec.distribution[1].nodeLabel["weight"]: "weight" is reserved, not a node label`},
		{"group with max for a label", admissionv1.Create, `{"spec":{` + target + `,"strategy":{"groups":[{"labels":{"a":"b","max":"3"},"weight":1}]}}}`, false,
			`spec.strategy.groups[0].labels["max"]: "max" is reserved, not a node label`},
		{"distribution with a separator in a value", admissionv1.Create, `{"spec":{` + target + `,"distribution":[{"nodeLabel":{"type":"a:b"},"weight":1}]}}`, false,
			`spec.distribution[0].nodeLabel["type"]: invalid node label value`},
		{"two groups with the same labels", admissionv1.Create, `{"spec":{` + target + `,"distribution":[{"nodeLabel":{"type":"spot"},"weight":1},{"nodeLabel":{"type":"spot"},"weight":2}]}}`, false,
			"spec.distribution[1]: invalid strategy: group 2: same node labels as group 1"},
		{"both forms", admissionv1.Create, `{"spec":{` + target + `,"strategy":{"text":"a=b,weight=1"},"distribution":[{"nodeLabel":{"type":"spot"},"weight":1}]}}`, false,
			"exactly one of strategy and distribution"},
		{"no strategy", admissionv1.Create, `{"spec":{` + target + `}}`, false, "exactly one of strategy and distribution"},
		{"bad selector", admissionv1.Create, `{"spec":{"target":{"selector":{"matchExpressions":[{"key":"app","operator":"Bogus"}]}},"strategy":{"text":"a=b,weight=1"}}}`, false,
			"spec.target.selector:"},
		{"empty selector", admissionv1.Create, `{"spec":{"target":{"selector":{}},"strategy":{"text":"a=b,weight=1"}}}`, false,
			"an empty selector would match every workload"},
		{"undecodable: fail open", admissionv1.Create, `{"spec":`, true, ""},
		{"delete", admissionv1.Delete, `{"spec":{}}`, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: tc.op, Object: runtime.RawExtension{Raw: []byte(tc.obj)}}}
			resp := PolicyValidator{}.Handle(context.Background(), req)
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v (%+v), want %v", resp.Allowed, resp.Result, tc.allowed)
			}
			if tc.msg != "" && !strings.Contains(resp.Result.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", resp.Result.Message, tc.msg)
			}
		})
	}
}

// TestValidatorsLabelNamespaces: with a Marker (webhook.scope: namespaces),
// a workload or PlacementPolicy that opts in has its namespace labelled
// before it is admitted, so that its first pods reach the pod webhook; a dry
// run, a refused object or one that does not opt in labels nothing.
func TestValidatorsLabelNamespaces(t *testing.T) {
	const policy = `{"spec":{"target":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"strategy":{"text":"` + good + `"}}}`
	for _, tc := range []struct {
		name    string
		handler func(*scope.Marker) admission.Handler
		obj     string
		dryRun  bool
		want    bool
	}{
		{"strategy on the workload", workloadValidator, `{"metadata":{"annotations":{"apportion.dev/strategy":"` + good + `"}}}`, false, true},
		{"strategy on the template", workloadValidator, `{"metadata":{},"spec":{"template":{"metadata":{"annotations":{"custom-pod-schedule-strategy":"` + good + `"}}}}}`, false, true},
		{"architectures on the workload", workloadValidator, `{"metadata":{"annotations":{"apportion.dev/architectures":"auto"}}}`, false, true},
		{"CronJob, strategy on its jobTemplate", workloadValidator, `{"metadata":{},"spec":{"jobTemplate":{"metadata":{"annotations":{"apportion.dev/strategy":"` + good + `"}}}}}`, false, true},
		{"CronJob, strategy on its Jobs' pod template", workloadValidator, `{"metadata":{},"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"annotations":{"apportion.dev/strategy":"` + good + `"}}}}}}}`, false, true},
		{"Workflow, strategy on its podMetadata", workloadValidator, `{"metadata":{},"spec":{"podMetadata":{"annotations":{"apportion.dev/strategy":"` + good + `"}}}}`, false, true},
		{"Workflow, invalid strategy on its podMetadata", workloadValidator, `{"metadata":{},"spec":{"podMetadata":{"annotations":{"apportion.dev/strategy":"a=b,weight=x"}}}}`, false, false},
		{"dry run", workloadValidator, `{"metadata":{"annotations":{"apportion.dev/strategy":"` + good + `"}}}`, true, false},
		{"invalid strategy", workloadValidator, `{"metadata":{"annotations":{"apportion.dev/strategy":"a=b,weight=x"}}}`, false, false},
		{"no strategy", workloadValidator, `{"metadata":{"annotations":{"apportion.dev/mode":"shadow"}}}`, false, false},
		{"policy", policyValidator, policy, false, true},
		{"policy, dry run", policyValidator, policy, true, false},
		{"invalid policy", policyValidator, `{"spec":{"target":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"}}}`, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(ns).Build()
			marker := &scope.Marker{Reader: c, Writer: c}
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "team", DryRun: &tc.dryRun,
				Object: runtime.RawExtension{Raw: []byte(tc.obj)}}}
			resp := tc.handler(marker).Handle(context.Background(), req)
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(ns), ns); err != nil {
				t.Fatal(err)
			}
			if got := ns.Labels[annotations.NamespacePlacement] == annotations.NamespacePlacementEnabled; got != tc.want {
				t.Errorf("namespace labelled %v (labels %v), want %v; allowed %v", got, ns.Labels, tc.want, resp.Allowed)
			}
		})
	}
}

func workloadValidator(m *scope.Marker) admission.Handler { return WorkloadValidator{Marker: m} }
func policyValidator(m *scope.Marker) admission.Handler   { return PolicyValidator{Marker: m} }

// TestPolicyValidatorAdmitsWhenLabellingFails: a valid policy whose
// namespace cannot be labelled is admitted all the same (fail open).
func TestPolicyValidatorAdmitsWhenLabellingFails(t *testing.T) {
	const policy = `{"spec":{"target":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"strategy":{"text":"` + good + `"}}}`
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	patched := false
	failing := interceptor.NewClient(c, interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			patched = true
			return errors.New("the API server is away")
		},
	})
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "team", Name: "p",
		Object: runtime.RawExtension{Raw: []byte(policy)}}}
	resp := PolicyValidator{Marker: &scope.Marker{Reader: c, Writer: failing}}.Handle(context.Background(), req)
	if !patched {
		t.Fatal("the namespace was not labelled")
	}
	if !resp.Allowed {
		t.Errorf("denied: %v", resp.Result)
	}
}
