package resolvecorpus

import (
	"bytes"
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/test"
)

// TestCorpus: the corpus is the size the differential tests need, covers
// every kind, and its YAML reads back as that many workloads.
func TestCorpus(t *testing.T) {
	cases := Generate(1, Cases)
	kinds := map[string]int{}
	for _, c := range cases {
		kinds[c.Kind]++
	}
	for _, k := range Kinds {
		if kinds[k] < Cases/len(Kinds) {
			t.Errorf("%d cases of %s", kinds[k], k)
		}
	}
	m := readBack(t, cases)
	if len(m.Workloads) != Cases {
		t.Fatalf("%d workloads read back, want %d", len(m.Workloads), Cases)
	}
}

// TestPlanAgreesWithExplain is the differential test offline: every case
// of the typed kinds gets the same answer from plan's preview of the
// manifests and from explain over a client holding the same objects (the
// e2e suite test/e2e/resolve does it for every kind on a live cluster).
func TestPlanAgreesWithExplain(t *testing.T) {
	cases := Generate(2, Cases)
	m := readBack(t, cases)
	previews, err := m.Preview(-1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	for _, c := range cases {
		if c.Kind == "Rollout" || c.Kind == "Workflow" {
			continue
		}
		objs = append(objs, c.Objects...)
		if c.Job != nil {
			objs = append(objs, OwnedJob(c))
		}
	}
	kube := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).Build()
	cl := &explain.Cluster{Reader: kube, Capacity: &capacity.NodeLabelCapacity{Reader: kube}, Policies: true, ClusterPolicies: true}
	compared, disagreements := 0, 0
	covered := map[string]int{}
	for i, c := range cases {
		if c.Kind == "Rollout" || c.Kind == "Workflow" {
			continue
		}
		r, err := cl.Workload(context.Background(), explain.Ref{Kind: c.ExplainKind(), Namespace: c.Namespace, Name: c.Name})
		if err != nil {
			t.Fatalf("explain %s %s/%s: %v", c.ExplainKind(), c.Namespace, c.Name, err)
		}
		got := FromPreview(&previews[i])
		for _, k := range Categories(got) {
			covered[k]++
		}
		if diff := Diff(got, r.Answer); diff != "" {
			disagreements++
			if disagreements <= 5 {
				t.Errorf("%s %s/%s: plan and explain disagree:\n%s", c.Kind, c.Namespace, c.Name, diff)
			}
		}
		compared++
	}
	if compared < 5*Cases/7 || disagreements > 0 {
		t.Errorf("%d cases compared, %d disagreements", compared, disagreements)
	}
	CheckCoverage(t, covered)
}

// readBack is the cases' YAML as plan reads it.
func readBack(t *testing.T, cases []Case) *plan.Manifests {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteYAML(&buf, cases); err != nil {
		t.Fatal(err)
	}
	m := plan.NewManifests("default")
	if err := m.Read(&buf, "corpus"); err != nil {
		t.Fatal(err)
	}
	return m
}
