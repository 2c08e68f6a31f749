package v1alpha1_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
)

// TestGeneratedCRD checks that chart/crds carries what the markers ask for:
// the server validates and defaults with it, so a marker lost in a refactor
// would silently let bad policies in.
func TestGeneratedCRD(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "chart", "crds", "apportion.dev_placementpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != v1alpha1.GroupVersion.Group || crd.Spec.Scope != apiextensionsv1.NamespaceScoped || crd.Spec.Names.Kind != "PlacementPolicy" {
		t.Fatalf("crd %s: group %s scope %s kind %s", crd.Name, crd.Spec.Group, crd.Spec.Scope, crd.Spec.Names.Kind)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != v1alpha1.GroupVersion.Version {
		t.Fatalf("versions %+v", crd.Spec.Versions)
	}
	v := crd.Spec.Versions[0]
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("no status subresource")
	}
	var columns []string
	for _, c := range v.AdditionalPrinterColumns {
		columns = append(columns, c.Name)
	}
	for _, want := range []string{"Target", "Replicas", "Within quota", "Ready", "Age"} {
		if !slices.Contains(columns, want) {
			t.Errorf("printer columns %v lack %q", columns, want)
		}
	}
	spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
	rules := func(s apiextensionsv1.JSONSchemaProps) []string {
		var out []string
		for _, r := range s.XValidations {
			out = append(out, r.Rule)
		}
		return out
	}
	// No default: an unset mode is the install's --default-mode.
	mode := spec.Properties["mode"]
	var enum []string
	for _, e := range mode.Enum {
		enum = append(enum, string(e.Raw))
	}
	if mode.Default != nil || strings.Join(enum, ",") != `"required","preferred","shadow"` {
		t.Errorf("mode: default %v enum %s", mode.Default, enum)
	}
	for _, tc := range []struct {
		at    string
		props apiextensionsv1.JSONSchemaProps
		rule  string
	}{
		{"spec", spec, "has(self.strategy) != has(self.distribution)"},
		{"spec.target", spec.Properties["target"], "has(self.name) != has(self.selector)"},
		{"spec.strategy", spec.Properties["strategy"], "has(self.groups) != has(self.text)"},
		{"spec.strategy.groups", spec.Properties["strategy"].Properties["groups"], "self.exists(g, has(g.weight) && g.weight > 0)"},
		{"spec.distribution", spec.Properties["distribution"], "self.exists(d, d.weight > 0)"},
	} {
		if !slices.Contains(rules(tc.props), tc.rule) {
			t.Errorf("%s: rules %v lack %q", tc.at, rules(tc.props), tc.rule)
		}
	}
	group := spec.Properties["strategy"].Properties["groups"].Items.Schema
	for _, f := range []string{"base", "weight"} {
		if m := group.Properties[f].Minimum; m == nil || *m != 0 {
			t.Errorf("groups[].%s: minimum %v, want 0", f, m)
		}
	}
	if !slices.Contains(group.Required, "labels") {
		t.Errorf("groups[] requires %v", group.Required)
	}
	if !slices.Contains(spec.Required, "target") {
		t.Errorf("spec requires %v", spec.Required)
	}
}

// TestGeneratedClusterCRD checks the ClusterPlacementPolicy CRD: cluster
// scope, the printer columns kubectl shows, allowSkip defaulting to true,
// the strategy's rules shared with PlacementPolicy, and the kinds a target
// may name.
func TestGeneratedClusterCRD(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "chart", "crds", "apportion.dev_clusterplacementpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != v1alpha1.GroupVersion.Group || crd.Spec.Scope != apiextensionsv1.ClusterScoped || crd.Spec.Names.Kind != v1alpha1.ClusterPlacementPolicyGVK.Kind {
		t.Fatalf("crd %s: group %s scope %s kind %s", crd.Name, crd.Spec.Group, crd.Spec.Scope, crd.Spec.Names.Kind)
	}
	v := crd.Spec.Versions[0]
	if v.Subresources == nil || v.Subresources.Status == nil {
		t.Error("no status subresource")
	}
	var columns []string
	for _, c := range v.AdditionalPrinterColumns {
		columns = append(columns, c.Name)
	}
	for _, want := range []string{"Priority", "Mode", "Matched", "Placed", "Ready", "Conflict", "Age"} {
		if !slices.Contains(columns, want) {
			t.Errorf("printer columns %v lack %q", columns, want)
		}
	}
	spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
	if d := spec.Properties["allowSkip"].Default; d == nil || string(d.Raw) != "true" {
		t.Errorf("allowSkip default %v, want true", d)
	}
	if !slices.Contains(spec.Required, "namespaceSelector") || !slices.Contains(spec.Required, "strategy") {
		t.Errorf("spec requires %v", spec.Required)
	}
	var rules []string
	for _, r := range spec.Properties["strategy"].XValidations {
		rules = append(rules, r.Rule)
	}
	if !slices.Contains(rules, "has(self.groups) != has(self.text)") {
		t.Errorf("spec.strategy rules %v", rules)
	}
	var kinds []string
	for _, e := range spec.Properties["target"].Properties["kinds"].Items.Schema.Enum {
		kinds = append(kinds, string(e.Raw))
	}
	const want = `"Deployment","StatefulSet","ReplicaSet","Rollout","Job","CronJob","Workflow"`
	if strings.Join(kinds, ",") != want {
		t.Errorf("target.kinds enum %v", kinds)
	}
	// A PlacementPolicy targets the same kinds.
	raw, err = os.ReadFile(filepath.Join("..", "..", "..", "chart", "crds", "apportion.dev_placementpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var namespaced apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &namespaced); err != nil {
		t.Fatal(err)
	}
	kinds = nil
	for _, e := range namespaced.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["target"].Properties["kind"].Enum {
		kinds = append(kinds, string(e.Raw))
	}
	if strings.Join(kinds, ",") != want {
		t.Errorf("PlacementPolicy target.kind enum %v", kinds)
	}
}
