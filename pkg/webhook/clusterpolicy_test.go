package webhook

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/scope"
)

// clusterFixture is a fake API with the namespaces web-a, web-b (team=web)
// and db (team=db), and objs; the Marker and Source read it.
func clusterFixture(t *testing.T, objs ...client.Object) (client.Client, *scope.Marker, *policy.Source) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs = append(objs,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web-a", Labels: map[string]string{"team": "web"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web-b", Labels: map[string]string{"team": "web"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: map[string]string{"team": "db"}}})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	return c, &scope.Marker{Reader: c, Writer: c}, policy.NewSource(c).WithClusterPolicies(nil)
}

func isLabelled(t *testing.T, c client.Client, name string) bool {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Labels[annotations.NamespacePlacement] == annotations.NamespacePlacementEnabled
}

const clusterPolicyJSON = `{"metadata":{"name":"platform"},"spec":{"namespaceSelector":{"matchLabels":{"team":"web"}},"strategy":{"text":"` + good + `"}}}`

// TestClusterPolicyValidator: a strategy or selector that does not parse is
// refused with the field it is in; a valid policy has the namespaces it
// covers labelled before it is admitted (not on a dry run).
func TestClusterPolicyValidator(t *testing.T) {
	for _, tc := range []struct {
		name     string
		obj      string
		dryRun   bool
		allowed  bool
		msg      string
		labelled bool
	}{
		{name: "valid", obj: clusterPolicyJSON, allowed: true, labelled: true},
		{name: "valid, dry run", obj: clusterPolicyJSON, dryRun: true, allowed: true},
		{name: "bad strategy", obj: `{"spec":{"namespaceSelector":{},"strategy":{"text":"a=b,weight=x"}}}`, msg: "spec.strategy.text: invalid strategy"},
		{name: "bad namespace selector", obj: `{"spec":{"namespaceSelector":{"matchExpressions":[{"key":"team","operator":"Bogus"}]},"strategy":{"text":"a=b,weight=1"}}}`, msg: "spec.namespaceSelector:"},
		{name: "bad target selector", obj: `{"spec":{"namespaceSelector":{},"target":{"selector":{"matchExpressions":[{"key":"app","operator":"Bogus"}]}},"strategy":{"text":"a=b,weight=1"}}}`, msg: "spec.target.selector:"},
		{name: "undecodable: fail open", obj: `{"spec":`, allowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, marker, src := clusterFixture(t)
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, DryRun: &tc.dryRun,
				Object: runtime.RawExtension{Raw: []byte(tc.obj)}}}
			resp := ClusterPolicyValidator{Marker: marker, Clusters: src}.Handle(context.Background(), req)
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v (%+v), want %v", resp.Allowed, resp.Result, tc.allowed)
			}
			if tc.msg != "" && !strings.Contains(resp.Result.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", resp.Result.Message, tc.msg)
			}
			for ns, want := range map[string]bool{"web-a": tc.labelled, "web-b": tc.labelled, "db": false} {
				if got := isLabelled(t, c, ns); got != want {
					t.Errorf("namespace %s labelled %v, want %v", ns, got, want)
				}
			}
		})
	}
}

// TestWorkloadValidatorClusterPolicy: a workload without annotations that a
// cluster policy covers has its namespace labelled when it is admitted (a
// namespace labelled team=web since the policy, say); one the policy does
// not cover, not.
func TestWorkloadValidatorClusterPolicy(t *testing.T) {
	cp := &v1alpha1.ClusterPlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "platform", UID: "c1", Generation: 1},
		Spec: v1alpha1.ClusterPlacementPolicySpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
			Target:   v1alpha1.ClusterTarget{Kinds: []string{"Deployment"}},
			Strategy: v1alpha1.Strategy{Text: good}}}
	for _, tc := range []struct {
		name, namespace, kind string
		want                  bool
	}{
		{"covered", "web-a", "Deployment", true},
		{"other kind", "web-a", "StatefulSet", false},
		{"namespace not selected", "db", "Deployment", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, marker, src := clusterFixture(t, cp.DeepCopy())
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: tc.namespace, Name: "web",
				Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: tc.kind}, Object: runtime.RawExtension{Raw: []byte(`{"metadata":{"labels":{"app":"web"}}}`)}}}
			if resp := (WorkloadValidator{Marker: marker, Clusters: src}).Handle(context.Background(), req); !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			if got := isLabelled(t, c, tc.namespace); got != tc.want {
				t.Errorf("namespace %s labelled %v, want %v", tc.namespace, got, tc.want)
			}
		})
	}
}
