package resolvecorpus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Cases is the size of the corpus: at least 500.
const Cases = 560

// Answer is what a surface says of one workload's resolution: the fields
// plan -f and explain share (workload.Answer's JSON keys).
func Answer(raw []byte) (workload.Answer, error) {
	var a workload.Answer
	err := json.Unmarshal(raw, &a)
	return a, err
}

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
	var buf bytes.Buffer
	if err := WriteYAML(&buf, cases); err != nil {
		t.Fatal(err)
	}
	m := plan.NewManifests("default")
	if err := m.Read(&buf, "corpus"); err != nil {
		t.Fatal(err)
	}
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
	var buf bytes.Buffer
	if err := WriteYAML(&buf, cases); err != nil {
		t.Fatal(err)
	}
	m := plan.NewManifests("default")
	if err := m.Read(&buf, "corpus"); err != nil {
		t.Fatal(err)
	}
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

// FromPreview is a plan preview's resolution.
func FromPreview(p *plan.WorkloadPreview) workload.Answer {
	return workload.Answer{Strategy: p.Strategy, Source: p.Source, Why: p.Why, Mode: p.Mode, ModeSource: p.ModeSource,
		NotPlaced: p.NotPlaced, Invalid: p.Invalid, Problems: p.Problems}
}

// Diff says how a and b differ, field by field; "" when they do not.
func Diff(a, b workload.Answer) string {
	var out bytes.Buffer
	field := func(name, x, y string) {
		if x != y {
			fmt.Fprintf(&out, "  %s: plan %q, explain %q\n", name, x, y)
		}
	}
	field("strategy", a.Strategy, b.Strategy)
	field("source", a.Source, b.Source)
	field("why", a.Why, b.Why)
	field("mode", a.Mode, b.Mode)
	field("modeSource", a.ModeSource, b.ModeSource)
	field("notPlaced", a.NotPlaced, b.NotPlaced)
	field("invalid", a.Invalid, b.Invalid)
	if !slices.Equal(a.Problems, b.Problems) {
		fmt.Fprintf(&out, "  problems: plan %q, explain %q\n", a.Problems, b.Problems)
	}
	return out.String()
}

// Categories are what an answer exercises, for the coverage check.
func Categories(a workload.Answer) []string {
	var out []string
	add := func(ok bool, k string) {
		if ok {
			out = append(out, k)
		}
	}
	add(strings.Contains(a.Source, "annotations["), "annotation")
	add(strings.HasPrefix(a.Source, "PlacementPolicy"), "PlacementPolicy")
	add(strings.HasPrefix(a.Source, "ClusterPlacementPolicy"), "ClusterPlacementPolicy")
	add(strings.HasPrefix(a.Source, "CronJob"), "CronJob annotation")
	add(strings.Contains(a.Why, "the policy of its CronJob"), "CronJob policy")
	add(strings.Contains(a.Why, "ties with"), "tie")
	add(strings.Contains(a.Why, "wins over"), "wins over")
	add(strings.Contains(a.Why, "allowSkip: false"), "skip refused")
	add(a.NotPlaced == workload.NotPlacedOptedOut, "opted out")
	add(a.NotPlaced == workload.NotPlacedNoStrategy, "no strategy")
	add(strings.Contains(a.NotPlaced, "did you mean"), "strategy key typo")
	add(a.Invalid != "", "invalid")
	add(len(a.Problems) > 0, "problems")
	add(a.ModeSource != "", "mode set")
	return out
}

// CheckCoverage fails when the corpus missed a category.
func CheckCoverage(t *testing.T, covered map[string]int) {
	t.Helper()
	for _, k := range []string{"annotation", "PlacementPolicy", "ClusterPlacementPolicy", "CronJob annotation", "CronJob policy", "tie",
		"wins over", "skip refused", "opted out", "no strategy", "strategy key typo", "invalid", "problems", "mode set"} {
		if covered[k] == 0 {
			t.Errorf("no case of %q", k)
		}
	}
	t.Logf("cases by category: %v", covered)
}
