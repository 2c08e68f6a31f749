package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// readCRDs reads the CRDs of dir (controller-gen's output), namespaced
// kinds first, then by kind.
func readCRDs(dir string) ([]apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no CRD (run make generate)", dir)
	}
	var crds []apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: kind %q, want CustomResourceDefinition", f, crd.Kind)
		}
		crds = append(crds, crd)
	}
	sort.Slice(crds, func(i, j int) bool {
		if a, b := crds[i].Spec.Scope, crds[j].Spec.Scope; a != b {
			return a == apiextensionsv1.NamespaceScoped
		}
		return crds[i].Spec.Names.Kind < crds[j].Spec.Names.Kind
	})
	return crds, nil
}

// field is one row of a kind's table.
type field struct {
	Path, Type, Default, Description string
	Required                         bool
}

func crdsPage(crds []apiextensionsv1.CustomResourceDefinition) (string, error) {
	var b strings.Builder
	b.WriteString(header("PlacementPolicy and ClusterPlacementPolicy fields", "the CRDs in chart/crds, generated from the Go types of pkg/apis"))
	b.WriteString(`The fields of the resources of the ` + code("apportion.dev") + ` API group, as the API server
validates them. How to use them, with examples: [PlacementPolicy and
ClusterPlacementPolicy](../placement-policies.md). The API is ` + code("v1alpha1") + `: what may change
between versions, and with how much notice, is in [Upgrading](../upgrading.md).

A field marked required must be set when the object that holds it is set. The
API server checks every constraint when a policy is created or changed; a
"Validation" is a rule over several fields, with the message ` + code("kubectl apply") + `
prints when the rule is broken. apportion writes ` + code("status") + `.

`)
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				return "", fmt.Errorf("%s %s: no schema", crd.Name, v.Name)
			}
			writeKind(&b, crd, v)
		}
	}
	return b.String(), nil
}

func writeKind(b *strings.Builder, crd apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion) {
	n := crd.Spec.Names
	s := v.Schema.OpenAPIV3Schema
	fmt.Fprintf(b, "## %s\n\n", n.Kind)
	fmt.Fprintf(b, "%s\n\n", strings.Join(strings.Fields(s.Description), " "))
	scope := "namespaced"
	if crd.Spec.Scope == apiextensionsv1.ClusterScoped {
		scope = "cluster-wide"
	}
	fmt.Fprintf(b, "`apiVersion: %s/%s`, `kind: %s`, %s; `kubectl get %s`", crd.Spec.Group, v.Name, n.Kind, scope, n.Plural)
	if len(n.ShortNames) > 0 {
		fmt.Fprintf(b, " (short name %s)", code(strings.Join(n.ShortNames, "`, `")))
	}
	if len(n.Categories) > 0 {
		fmt.Fprintf(b, ", also listed by `kubectl get %s`", strings.Join(n.Categories, "`, `kubectl get "))
	}
	b.WriteString(".")
	var cols []string
	for _, c := range v.AdditionalPrinterColumns {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		} else {
			cols = append(cols, c.Name+" (with `-o wide`)")
		}
	}
	if len(cols) > 0 {
		fmt.Fprintf(b, " Its columns: %s.", strings.Join(cols, ", "))
	}
	b.WriteString("\n\n")
	for _, top := range []string{"spec", "status"} {
		p, ok := s.Properties[top]
		if !ok {
			continue
		}
		fmt.Fprintf(b, "### %s.%s\n\n| Field | Type | Required | Default | Description |\n|---|---|---|---|---|\n", n.Kind, top)
		for _, f := range fields(top, p, slices.Contains(s.Required, top)) {
			req := ""
			if f.Required {
				req = "yes"
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", code(f.Path), f.Type, req, f.Default, cell(f.Description))
		}
		b.WriteString("\n")
	}
}

// fields returns the row of the field at path and the rows of the fields
// inside it, depth first in name order. The Kubernetes types a field may hold
// (a label selector, conditions) are one row each: their fields are
// Kubernetes's.
func fields(path string, s apiextensionsv1.JSONSchemaProps, required bool) []field {
	f := field{Path: path, Type: schemaType(s), Required: required, Description: describeSchema(s)}
	if s.Default != nil {
		f.Default = code(string(s.Default.Raw))
	}
	out := []field{f}
	if known := kubernetesType(s); known != "" {
		return out
	}
	props, req, prefix := s.Properties, s.Required, path+"."
	if s.Type == "array" && s.Items != nil && s.Items.Schema != nil {
		props, req, prefix = s.Items.Schema.Properties, s.Items.Schema.Required, path+"[]."
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		out = append(out, fields(prefix+name, props[name], slices.Contains(req, name))...)
	}
	return out
}

// kubernetesType names the Kubernetes type a schema is, by its fields:
// metav1.LabelSelector, or a list of metav1.Condition; "" for others.
func kubernetesType(s apiextensionsv1.JSONSchemaProps) string {
	if s.Type == "array" && s.Items != nil && s.Items.Schema != nil && hasExactly(s.Items.Schema.Properties,
		"lastTransitionTime", "message", "observedGeneration", "reason", "status", "type") {
		return "[]Condition"
	}
	if s.Type == "object" && hasExactly(s.Properties, "matchExpressions", "matchLabels") {
		return "LabelSelector"
	}
	return ""
}

func hasExactly(props map[string]apiextensionsv1.JSONSchemaProps, names ...string) bool {
	if len(props) != len(names) {
		return false
	}
	for _, n := range names {
		if _, ok := props[n]; !ok {
			return false
		}
	}
	return true
}

// Where the Kubernetes types a field may hold are documented.
var kubernetesTypeDocs = map[string]string{
	"LabelSelector": "https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/label-selector/",
	"[]Condition":   "https://pkg.go.dev/k8s.io/apimachinery/pkg/apis/meta/v1#Condition",
}

func schemaType(s apiextensionsv1.JSONSchemaProps) string {
	if known := kubernetesType(s); known != "" {
		return "[" + known + "](" + kubernetesTypeDocs[known] + ")"
	}
	switch s.Type {
	case "array":
		if s.Items != nil && s.Items.Schema != nil {
			return "[]" + schemaType(*s.Items.Schema)
		}
		return "array"
	case "object":
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			return "map[string]" + schemaType(*s.AdditionalProperties.Schema)
		}
		return "object"
	case "integer", "number", "string":
		if s.Format != "" {
			return s.Format
		}
	}
	return s.Type
}

// describeSchema is a field's description followed by what the API server
// checks of it.
func describeSchema(s apiextensionsv1.JSONSchemaProps) string {
	var parts []string
	if d := strings.TrimSpace(s.Description); d != "" {
		if !strings.ContainsAny(d[len(d)-1:], ".:;!?") {
			d += "."
		}
		parts = append(parts, d)
	}
	add := func(format string, a ...any) { parts = append(parts, fmt.Sprintf(format, a...)) }
	constraints := func(s apiextensionsv1.JSONSchemaProps, of string) {
		if len(s.Enum) > 0 {
			vals := make([]string, len(s.Enum))
			for i, e := range s.Enum {
				vals[i] = code(strings.Trim(string(e.Raw), `"`))
			}
			if of == "" {
				add("One of %s.", strings.Join(vals, ", "))
			} else {
				add("%sone of %s.", of, strings.Join(vals, ", "))
			}
		}
		if s.Minimum != nil {
			add("%sMinimum %g.", of, *s.Minimum)
		}
		if s.Maximum != nil {
			add("%sMaximum %g.", of, *s.Maximum)
		}
		if s.MinLength != nil {
			add("%sAt least %s.", of, count(*s.MinLength, "character"))
		}
		if s.MaxLength != nil {
			add("%sAt most %s.", of, count(*s.MaxLength, "character"))
		}
		if s.MinProperties != nil {
			add("%sAt least %s.", of, count(*s.MinProperties, "entry"))
		}
	}
	constraints(s, "")
	if s.MinItems != nil {
		add("At least %s.", count(*s.MinItems, "item"))
	}
	if s.MaxItems != nil {
		add("At most %s.", count(*s.MaxItems, "item"))
	}
	if s.Type == "array" && s.Items != nil && s.Items.Schema != nil {
		constraints(*s.Items.Schema, "Each item: ")
	}
	for _, r := range s.XValidations {
		add("Validation: %s.", strings.TrimSuffix(r.Message, "."))
	}
	return strings.Join(parts, " ")
}

// count writes n things, "1 item" or "2 items".
func count(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	if base, ok := strings.CutSuffix(thing, "y"); ok {
		return fmt.Sprintf("%d %sies", n, base)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
