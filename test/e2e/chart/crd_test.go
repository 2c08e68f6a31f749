//go:build e2e

package chart_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/apportion-dev/apportion/test/framework"
)

const (
	crdRelease = "apportion-crd"
	policyCRD  = "placementpolicies.apportion.dev"
	// clusterPolicyCRD is installed by the main chart's crds/ too.
	clusterPolicyCRD = "clusterplacementpolicies.apportion.dev"
)

func crdChartDir() string { return filepath.Join(framework.RepoRoot(), "chart-crd") }

// testCRDUpgrade moves the PlacementPolicy CRD that the Install step created
// from chart/crds (helm installs crds/ once and never upgrades it) into a
// release of the apportion-crd chart, as the documented migration does, and
// upgrades it: a policy created before keeps existing, and the served schema
// follows the chart. The "previous" apportion-crd (testdata, 0.0.1) has
// today's CRD without spec.distribution. The CRD stays installed, owned by
// the apportion-crd release, for the steps after this one.
func testCRDUpgrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	start := time.Now()

	crd := getCRD(t)
	t.Logf("before the migration: the CRD's labels %v, annotations %v", crd.Labels, helmAnnotations(crd))
	ns := newNamespace(t, "crd")
	policy := placementPolicy(ns, "web-split", map[string]any{
		"target":   map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
		"strategy": map[string]any{"text": seed004},
	})
	if err := env.kube.Create(ctx, policy); err != nil {
		t.Fatalf("creating a PlacementPolicy: %v", err)
	}

	// Without the ownership metadata, helm refuses to take the CRD over.
	out, err := helm(ctx, "install", crdRelease, testdata("apportion-crd-0.0.1"), "-n", namespace)
	if err == nil || !strings.Contains(out, "invalid ownership metadata") {
		t.Fatalf("helm install %s over a CRD no release owns: want Helm's ownership error, got %v\n%s", crdRelease, err, out)
	}

	// The migration, as a user runs it: every CRD the main chart
	// installed (both, with this version).
	for _, args := range [][]string{
		{"label", "crd", policyCRD, clusterPolicyCRD, "app.kubernetes.io/managed-by=Helm", "--overwrite"},
		{"annotate", "crd", policyCRD, clusterPolicyCRD, "meta.helm.sh/release-name=" + crdRelease, "meta.helm.sh/release-namespace=" + namespace, "--overwrite"},
	} {
		if out, err := kubectl(args...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := helm(ctx, "install", crdRelease, testdata("apportion-crd-0.0.1"), "-n", namespace); err != nil {
		t.Fatalf("helm install %s 0.0.1 after the migration: %v\n%s", crdRelease, err, out)
	}
	if hasDistribution(t) {
		t.Fatal("after installing apportion-crd 0.0.1, the CRD's schema still has spec.distribution")
	}
	distribution := placementPolicy(ns, "distributed", map[string]any{
		"target": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
		"distribution": []any{
			map[string]any{"nodeLabel": map[string]any{capacity: "on-demand"}, "weight": int64(80)},
			map[string]any{"nodeLabel": map[string]any{capacity: "spot"}, "weight": int64(20)},
		},
	})
	// The API server serves a changed schema shortly after the CRD changes.
	// Strict field validation refuses a field the served schema does not
	// have (the default would drop it with a warning).
	strict := []client.CreateOption{client.DryRunAll, client.FieldValidation("Strict")}
	waitFor(t, time.Minute, "the old schema served: spec.distribution an unknown field", func() error {
		err := env.kube.Create(ctx, distribution.DeepCopy(), strict...)
		switch {
		case err == nil:
			return errors.New("a policy in the distribution form was accepted")
		case !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "spec.distribution"`):
			return err
		}
		return nil
	})
	expectRelease(ctx, t, 1, "0.0.1")

	if out, err := helm(ctx, "upgrade", crdRelease, crdChartDir(), "-n", namespace); err != nil {
		t.Fatalf("helm upgrade %s: %v\n%s", crdRelease, err, out)
	}
	if !hasDistribution(t) {
		t.Fatal("after helm upgrade apportion-crd, the CRD's schema has no spec.distribution")
	}
	waitFor(t, time.Minute, "the new schema served: a policy in the distribution form accepted", func() error {
		return env.kube.Create(ctx, distribution.DeepCopy(), strict...)
	})
	expectRelease(ctx, t, 2, chartVersion(t, crdChartDir()))

	crd = getCRD(t)
	if got := crd.Annotations["helm.sh/resource-policy"]; got != "keep" {
		t.Errorf("the upgraded CRD's helm.sh/resource-policy is %q, want keep", got)
	}
	if got := crd.Annotations["meta.helm.sh/release-name"]; got != crdRelease {
		t.Errorf("the upgraded CRD belongs to release %q, want %s", got, crdRelease)
	}
	got := placementPolicy(ns, policy.GetName(), nil)
	if err := env.kube.Get(ctx, client.ObjectKeyFromObject(policy), got); err != nil {
		t.Fatalf("the PlacementPolicy created before the migration: %v", err)
	}
	if text, _, _ := unstructured.NestedString(got.Object, "spec", "strategy", "text"); text != seed004 {
		t.Errorf("the PlacementPolicy's strategy is %q after the upgrade, want %q", text, seed004)
	}
	t.Logf("CRD moved into release %s, upgraded 0.0.1 → %s, the PlacementPolicy kept: %s",
		crdRelease, chartVersion(t, crdChartDir()), time.Since(start).Round(time.Millisecond))
}

func getCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := env.kube.Get(t.Context(), client.ObjectKey{Name: policyCRD}, &crd); err != nil {
		t.Fatalf("reading CRD %s: %v", policyCRD, err)
	}
	return &crd
}

func helmAnnotations(crd *apiextensionsv1.CustomResourceDefinition) map[string]string {
	out := map[string]string{}
	for k, v := range crd.Annotations {
		if strings.Contains(k, "helm.sh/") {
			out[k] = v
		}
	}
	return out
}

// hasDistribution says whether the stored CRD's v1alpha1 schema has
// spec.distribution.
func hasDistribution(t *testing.T) bool {
	t.Helper()
	crd := getCRD(t)
	for _, v := range crd.Spec.Versions {
		if v.Name != "v1alpha1" {
			continue
		}
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			t.Fatal("the CRD's v1alpha1 has no openAPIV3Schema")
		}
		_, ok := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["distribution"]
		return ok
	}
	t.Fatal("the CRD serves no v1alpha1")
	return false
}

func placementPolicy(ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion("apportion.dev/v1alpha1")
	u.SetKind("PlacementPolicy")
	u.SetNamespace(ns)
	u.SetName(name)
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

// helmRelease is one release as `helm list -o json` shows it.
type helmRelease struct {
	Name       string `json:"name"`
	Revision   string `json:"revision"`
	Chart      string `json:"chart"`
	AppVersion string `json:"app_version"`
	Status     string `json:"status"`
}

// helmList returns the releases of the suite's namespace.
func helmList(ctx context.Context, t *testing.T) []helmRelease {
	t.Helper()
	out, err := helm(ctx, "list", "-n", namespace, "-o", "json")
	if err != nil {
		t.Fatalf("helm list: %v\n%s", err, out)
	}
	var list []helmRelease
	// helm's warnings, if any, come before the one line of JSON.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &list); err != nil {
		t.Fatalf("helm list: %v\n%s", err, out)
	}
	return list
}

// expectRelease checks helm's record of the apportion-crd release: its
// revision and the chart version it runs.
func expectRelease(ctx context.Context, t *testing.T, revision int, version string) {
	t.Helper()
	list := slices.DeleteFunc(helmList(ctx, t), func(r helmRelease) bool { return r.Name != crdRelease })
	want := fmt.Sprintf("revision %d, chart %s-%s, deployed", revision, crdRelease, version)
	if len(list) != 1 || fmt.Sprintf("revision %s, chart %s, %s", list[0].Revision, list[0].Chart, list[0].Status) != want {
		t.Fatalf("helm list says %+v, want %s", list, want)
	}
}

func chartVersion(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Version string `json:"version"`
	}
	if err := yaml.Unmarshal(b, &meta); err != nil || meta.Version == "" {
		t.Fatalf("%s/Chart.yaml: no version (%v)", dir, err)
	}
	return meta.Version
}
