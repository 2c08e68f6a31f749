package resolvecorpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/pkg/plan"
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
