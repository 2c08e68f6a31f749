//go:build chart

package chartrender

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// crdChartDir is the apportion-crd chart: the CRDs of chart/crds as
// templates, so that helm upgrade updates them.
var crdChartDir = filepath.Join("..", "..", "chart-crd")

const resourcePolicy = "helm.sh/resource-policy"

type chartMeta struct {
	Name       string `json:"name"`
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

func readChartMeta(t *testing.T, dir string) chartMeta {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m chartMeta
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s/Chart.yaml: %v", dir, err)
	}
	return m
}

// The two charts are released together: apportion-crd's version and
// appVersion are always apportion's.
func TestCRDChartVersionIsTheChartsVersion(t *testing.T) {
	app, crd := readChartMeta(t, chartDir), readChartMeta(t, crdChartDir)
	if crd.Name != "apportion-crd" {
		t.Errorf("chart-crd/Chart.yaml: name %q, want apportion-crd", crd.Name)
	}
	if crd.Version == "" || crd.Version != app.Version {
		t.Errorf("chart-crd/Chart.yaml: version %q, chart/Chart.yaml: %q; they must be equal", crd.Version, app.Version)
	}
	if crd.AppVersion == "" || crd.AppVersion != app.AppVersion {
		t.Errorf("chart-crd/Chart.yaml: appVersion %q, chart/Chart.yaml: %q; they must be equal", crd.AppVersion, app.AppVersion)
	}
}

// apportion-crd renders exactly the CRDs of chart/crds, each as
// controller-gen wrote it plus helm.sh/resource-policy: keep, so that
// uninstalling apportion-crd leaves the CRDs and every PlacementPolicy.
func TestCRDChartRendersChartCRDs(t *testing.T) {
	out, err := helmTemplate(t, crdChartDir)
	if err != nil {
		t.Fatal(err)
	}
	rendered := objects(t, out)
	files, err := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in chart/crds (%v)", err)
	}
	if len(rendered) != len(files) {
		keys := make([]string, 0, len(rendered))
		for k := range rendered {
			keys = append(keys, k)
		}
		t.Errorf("apportion-crd renders %v, want the %d CRDs of chart/crds", keys, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		if err := yaml.Unmarshal(b, &want); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		w := &unstructured.Unstructured{Object: want}
		got, ok := rendered["CustomResourceDefinition/"+w.GetName()]
		if !ok {
			t.Errorf("apportion-crd does not render %s (%s); run make generate", w.GetName(), f)
			continue
		}
		got = got.DeepCopy()
		ann := got.GetAnnotations()
		if ann[resourcePolicy] != "keep" {
			t.Errorf("CRD %s: %s %q, want keep", w.GetName(), resourcePolicy, ann[resourcePolicy])
		}
		delete(ann, resourcePolicy)
		got.SetAnnotations(ann)
		if !reflect.DeepEqual(got.Object, w.Object) {
			t.Errorf("CRD %s in apportion-crd differs from %s beyond %s: run make generate", w.GetName(), f, resourcePolicy)
		}
	}
}

// An umbrella chart that lists apportion as a dependency and sets global
// values renders: helm validates the subchart's values, globals included,
// against chart/values.schema.json, which must accept `global`. The same
// umbrella with a misspelt apportion key fails, so the schema is applied.
func TestUmbrellaChartWithGlobals(t *testing.T) {
	meta := readChartMeta(t, chartDir)
	umbrella := filepath.Join(t.TempDir(), "umbrella")
	if err := os.CopyFS(filepath.Join(umbrella, "charts", "apportion"), os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	chartYAML := "apiVersion: v2\nname: umbrella\nversion: 1.0.0\ndependencies:\n" +
		"  - name: apportion\n    version: " + meta.Version + "\n    repository: file://" + abs + "\n"
	if err := os.WriteFile(filepath.Join(umbrella, "Chart.yaml"), []byte(chartYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	values := func(name, text string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := values("values.yaml", `global:
  imageRegistry: registry.example.com
  labels:
    team: platform
apportion:
  replicas: 3
  controller:
    image:
      repository: registry.example.com/apportion
`)
	out, err := helmTemplate(t, umbrella, "-f", good)
	if err != nil {
		t.Fatalf("the umbrella chart with global values does not render: %v", err)
	}
	deploy := get(t, objects(t, out), "Deployment", release)
	// Numbers come out of YAML as float64.
	if n, _, _ := unstructured.NestedFieldNoCopy(deploy.Object, "spec", "replicas"); n != float64(3) {
		t.Errorf("the subchart's Deployment has %v replicas, want the umbrella's 3", n)
	}

	bad := values("misspelt.yaml", "global:\n  imageRegistry: registry.example.com\napportion:\n  replicaz: 3\n")
	_, err = helmTemplate(t, umbrella, "-f", bad)
	if err == nil || !strings.Contains(err.Error(), "replicaz") {
		t.Errorf("a misspelt apportion key in the umbrella's values: want helm to refuse replicaz by the schema, got %v", err)
	}

	// global must be a map, alone too.
	if _, err := helmTemplate(t, chartDir, "--set", "global.imageRegistry=registry.example.com"); err != nil {
		t.Errorf("the chart alone with a global value: %v", err)
	}
	if _, err := helmTemplate(t, chartDir, "--set", "global=1"); err == nil {
		t.Error("global=1 was accepted; the schema wants a map")
	}
}
