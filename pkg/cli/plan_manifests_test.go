package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// platformDocs are a release's manifests as helm template writes them, with
// the platform's policies: three workloads in two namespaces, a
// PlacementPolicy (in a List), two ClusterPlacementPolicies covering team-b
// (z-spot wins by priority alone: a-spread is older and first by name),
// the Namespace documents and a Service.
var platformDocs = []string{`apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: web}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b, labels: {team: web}}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: team-a}
spec: {ports: [{port: 80}]}
`, `apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: team-a, labels: {app: api}}
spec:
  replicas: 4
  template: {metadata: {labels: {app: api}}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: own
  namespace: team-a
  annotations: {apportion.dev/strategy: "zone=x,weight=1"}
spec:
  replicas: 3
---
# no namespace: --namespace team-b
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 7
  template: {metadata: {labels: {app: db}}}
`, `apiVersion: v1
kind: List
items:
- apiVersion: apportion.dev/v1alpha1
  kind: PlacementPolicy
  metadata: {name: api-split, namespace: team-a}
  spec:
    target: {kind: Deployment, name: api}
    strategy: {text: "a=1,weight=1:b=2,weight=1"}
`, `apiVersion: apportion.dev/v1alpha1
kind: ClusterPlacementPolicy
metadata: {name: a-spread, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  namespaceSelector: {matchLabels: {team: web}}
  priority: 1
  strategy: {text: "zone=a,weight=1:zone=b,weight=1"}
---
apiVersion: apportion.dev/v1alpha1
kind: ClusterPlacementPolicy
metadata: {name: z-spot, creationTimestamp: "2025-01-01T00:00:00Z"}
spec:
  namespaceSelector: {matchLabels: {team: web}}
  priority: 10
  mode: shadow
  strategy:
    groups:
    - labels: {karpenter.sh/capacity-type: on-demand}
      base: 1
      weight: 1
      max: 2
    - labels: {karpenter.sh/capacity-type: spot}
      weight: 3
`}

type previewJSON struct {
	Workloads []struct {
		Kind      string           `json:"kind"`
		Namespace string           `json:"namespace"`
		Name      string           `json:"name"`
		Replicas  int              `json:"replicas"`
		Source    string           `json:"source"`
		Mode      string           `json:"mode"`
		NotPlaced string           `json:"notPlaced"`
		Counts    map[string]int64 `json:"counts"`
	} `json:"workloads"`
}

func previewOK(t *testing.T, stdin string, args ...string) (previewJSON, string) {
	t.Helper()
	code, out, errOut := run(t, stdin, append([]string{"plan", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("plan %q: exit %d, stderr %q", args, code, errOut)
	}
	var p previewJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("plan %q: output is not JSON: %v\n%s", args, err, out)
	}
	return p, errOut
}

// TestPlanManifests: each workload of a multi-document input gets the
// source the webhook would give it (its annotation, its namespace's
// PlacementPolicy, the highest-priority ClusterPlacementPolicy), that
// source's mode and the split at its replicas; other kinds are counted
// in one line; --namespace-labels replaces a Namespace document's labels.
func TestPlanManifests(t *testing.T) {
	stdin := strings.Join(platformDocs, "---\n")
	p, errOut := previewOK(t, stdin, "-f", "-", "-n", "team-b")
	if errOut != "skipped 1 document of kinds plan does not read: Service 1\n" {
		t.Errorf("stderr %q, want the one skipped Service", errOut)
	}
	type want struct {
		id, source, mode string
		counts           map[string]int64
	}
	check := func(p previewJSON, wants []want) {
		t.Helper()
		if len(p.Workloads) != len(wants) {
			t.Fatalf("%d workloads, want %d: %+v", len(p.Workloads), len(wants), p)
		}
		for i, w := range wants {
			got := p.Workloads[i]
			if id := got.Kind + " " + got.Namespace + "/" + got.Name; id != w.id || got.Source != w.source || got.Mode != w.mode {
				t.Errorf("workload %d: %s from %q, mode %q; want %s from %q, mode %q", i, id, got.Source, got.Mode, w.id, w.source, w.mode)
			}
			if len(got.Counts) != len(w.counts) {
				t.Errorf("%s: counts %v, want %v", w.id, got.Counts, w.counts)
			}
			for k, n := range w.counts {
				if got.Counts[k] != n {
					t.Errorf("%s: counts %v, want %v", w.id, got.Counts, w.counts)
				}
			}
		}
	}
	check(p, []want{
		{"Deployment team-a/api", "PlacementPolicy team-a/api-split", "required", map[string]int64{"a=1": 2, "b=2": 2}},
		{"Deployment team-a/own", "Deployment own metadata.annotations[apportion.dev/strategy]", "required", map[string]int64{"zone=x": 3}},
		// on-demand: base 1, then a quarter of the rest, capped at 2.
		{"StatefulSet team-b/db", "ClusterPlacementPolicy z-spot", "shadow", map[string]int64{"karpenter.sh/capacity-type=on-demand": 2, "karpenter.sh/capacity-type=spot": 5}},
	})

	// The flag wins over team-b's Namespace document: no cluster policy
	// covers it any more, and nothing places db.
	p, _ = previewOK(t, stdin, "-f", "-", "-n", "team-b", "--namespace-labels", "team-b=team=data,tier=gold")
	if db := p.Workloads[2]; db.Name != "db" || db.Source != "" || db.Counts != nil || !strings.HasPrefix(db.NotPlaced, "no strategy: no apportion.dev/strategy annotation") {
		t.Errorf("db with team-b labelled team=data: %+v", db)
	}
	if api := p.Workloads[0]; api.Source != "PlacementPolicy team-a/api-split" {
		t.Errorf("team-a's api changed with team-b's labels: %+v", api)
	}

	// The table names each workload, its source and mode, and the cap.
	code, out, _ := run(t, stdin, "plan", "-f", "-", "-n", "team-b", "--namespace-labels", "team-a=")
	for _, line := range []string{"Deployment team-a/api\nsource:    PlacementPolicy team-a/api-split\nmode:      required\n",
		"StatefulSet team-b/db\nsource:    ClusterPlacementPolicy z-spot\nmode:      shadow\n", "2 (cap 2)"} {
		if code != 0 || !strings.Contains(out, line) {
			t.Errorf("table (exit %d) lacks %q:\n%s", code, line, out)
		}
	}
}

// TestPlanManifestsDirectory: -f of a directory reads every *.yaml, *.yml
// and *.json under it, subdirectories included, and no other file.
func TestPlanManifestsDirectory(t *testing.T) {
	dir := t.TempDir()
	names := []string{"namespaces.yaml", "templates/workloads.yml", "templates/deep/policy.yaml", "cluster.YAML"}
	for i, name := range names {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(platformDocs[i]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "templates", "NOTES.txt"), []byte("{{ not: [yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := `{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "json", "namespace": "team-b"}, "spec": {"replicas": 2}}`
	if err := os.WriteFile(filepath.Join(dir, "templates", "json.json"), []byte(db), 0o600); err != nil {
		t.Fatal(err)
	}
	p, _ := previewOK(t, "", "-f", dir, "-n", "team-b")
	var got []string
	for _, w := range p.Workloads {
		got = append(got, w.Namespace+"/"+w.Name+" "+w.Source)
	}
	want := []string{"team-b/json ClusterPlacementPolicy z-spot", "team-a/api PlacementPolicy team-a/api-split",
		"team-a/own Deployment own metadata.annotations[apportion.dev/strategy]", "team-b/db ClusterPlacementPolicy z-spot"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("workloads from the directory:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPlanManifestsErrors: a document that does not parse is named by file
// and index; a workload given twice is an error; an invalid strategy is
// printed with the others and fails the command, as for one workload.
func TestPlanManifestsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const ok = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n"
	for _, tc := range []struct {
		file, want string
	}{
		{write("replicas.yaml", ok+"---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b}\nspec: {replicas: many}\n"),
			"replicas.yaml: document 2: Deployment: json: cannot unmarshal string"},
		// helm template's comment-only documents count.
		{write("syntax.yaml", ok+"---\n# Source: chart/templates/empty.yaml\n---\nkind: [Service\n"), "syntax.yaml: document 3: "},
		{write("list.yaml", "kind: List\napiVersion: v1\nitems:\n- {apiVersion: apps/v1, kind: Deployment, metadata: {name: a}}\n- {apiVersion: apportion.dev/v1alpha1, kind: PlacementPolicy, spec: 7}\n"),
			"list.yaml: document 1, item 2: PlacementPolicy: "},
		{write("twice.yaml", ok+"---\n"+ok), "twice.yaml: document 2: Deployment default/a again (first in "},
	} {
		code, out, errOut := run(t, "", "plan", "-f", tc.file)
		if code != ExitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", filepath.Base(tc.file), code, out, errOut, ExitUsage, tc.want)
		}
	}
	bad := write("bad.yaml", ok+"---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b, annotations: {apportion.dev/strategy: 'a=b,weight=x'}}\n")
	code, out, errOut := run(t, "", "plan", "-f", bad)
	if code != ExitUsage || !strings.Contains(out, "Deployment default/a\nreplicas:    1\nnot placed:  no strategy") ||
		!strings.Contains(errOut, `1 of 2 workloads have no preview: Deployment default/b: Deployment b metadata.annotations[apportion.dev/strategy]: invalid strategy: group 1, item 2 "weight=x"`) {
		t.Errorf("invalid strategy: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestPlanManifestsBatch: a Job is previewed at its parallelism, its pod
// template's strategy first; a CronJob's Jobs at theirs, the strategy from
// the CronJob when neither the jobTemplate nor its pods carry one.
func TestPlanManifestsBatch(t *testing.T) {
	const docs = `apiVersion: batch/v1
kind: Job
metadata:
  name: render
  namespace: ci
  annotations: {apportion.dev/strategy: "zone=x,weight=1"}
spec:
  parallelism: 8
  template:
    metadata:
      annotations: {apportion.dev/strategy: "a=1,weight=1:b=2,weight=3"}
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
  namespace: ci
  annotations: {apportion.dev/strategy: "a=1,base=2,weight=1:b=2,weight=1"}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      parallelism: 6
`
	p, _ := previewOK(t, docs, "-f", "-")
	if len(p.Workloads) != 2 {
		t.Fatalf("%d workloads, want 2: %+v", len(p.Workloads), p)
	}
	for i, want := range []struct {
		id, source string
		counts     map[string]int64
	}{
		{"Job ci/render", "Job render spec.template.metadata.annotations[apportion.dev/strategy]", map[string]int64{"a=1": 2, "b=2": 6}},
		{"CronJob ci/nightly", "CronJob nightly metadata.annotations[apportion.dev/strategy]", map[string]int64{"a=1": 4, "b=2": 2}},
	} {
		got := p.Workloads[i]
		if id := got.Kind + " " + got.Namespace + "/" + got.Name; id != want.id || got.Source != want.source || fmt.Sprint(got.Counts) != fmt.Sprint(want.counts) {
			t.Errorf("workload %d: %s from %q, counts %v; want %s from %q, counts %v", i, id, got.Source, got.Counts, want.id, want.source, want.counts)
		}
	}
}
