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
