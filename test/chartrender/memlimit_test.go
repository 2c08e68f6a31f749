//go:build chart

package chartrender

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// GOMEMLIMIT follows the controller container's memory limit, whatever the
// values set it to.
func TestGoMemLimitFromTheContainerLimit(t *testing.T) {
	out, err := helmTemplate(t, chartDir, "--set", "controller.resources.limits.memory=300Mi")
	if err != nil {
		t.Fatal(err)
	}
	deploy := get(t, objects(t, out), "Deployment", release)
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		c := c.(map[string]any)
		env, _, _ := unstructured.NestedSlice(c, "env")
		for _, e := range env {
			e := e.(map[string]any)
			if e["name"] != "GOMEMLIMIT" {
				continue
			}
			ref, _, _ := unstructured.NestedMap(e, "valueFrom", "resourceFieldRef")
			if ref["resource"] != "limits.memory" || ref["containerName"] != c["name"] {
				t.Fatalf("GOMEMLIMIT from %v, want the limits.memory of container %v", ref, c["name"])
			}
			limit, _, _ := unstructured.NestedString(c, "resources", "limits", "memory")
			if limit != "300Mi" {
				t.Fatalf("container %v: memory limit %q, want 300Mi", c["name"], limit)
			}
			return
		}
	}
	t.Fatal("no container sets GOMEMLIMIT")
}
