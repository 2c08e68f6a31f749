package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/apportion-dev/apportion/pkg/strategy"
)

// streamStrategies: the AWS sample's, a long period, a group of weight 0,
// and caps that leave pods beyond them.
var streamStrategies = []string{
	"karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3",
	"a=1,weight=33:b=2,weight=67",
	"a=1,base=2:b=2,weight=1:c=3,weight=2",
	"a=1,base=1,weight=1,max=4:b=2,weight=2,max=6",
}

func parse(t testing.TB, text string) *strategy.Strategy {
	t.Helper()
	s, err := strategy.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stepped is the group of pods 1..n as the engine's Next gives them, one at
// a time, and the tally: what a preview must say.
func stepped(t *testing.T, s *strategy.Strategy, n int) ([]int, []int64, int64) {
	t.Helper()
	m, err := Method(s)
	if err != nil {
		t.Fatal(err)
	}
	seq, counts, beyond := make([]int, n), make([]int64, m.Len()), int64(0)
	for i := range seq {
		g := m.Next(counts, 1<<len(s.Groups)-1)
		if g < 0 {
			seq[i], beyond = -1, beyond+1
			continue
		}
		seq[i] = g
		counts[g]++
	}
	return seq, counts, beyond
}

// computeBoth is s at n from ComputeWith and from Summarize.
func computeBoth(t *testing.T, s *strategy.Strategy, n int) (*Result, *Result) {
	t.Helper()
	full, err := ComputeWith(s, n, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Summarize(s, n, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return full, sum
}

// The counts at n, taken from the engine at once, are the tally of n
// steps; ComputeWith holds every step, Summarize none and yields them all.
func TestSummarizeMatchesSteps(t *testing.T) {
	sizes := []int{4999, 123457}
	for n := range 120 {
		sizes = append(sizes, n)
	}
	for _, text := range streamStrategies {
		s := parse(t, text)
		for _, n := range sizes {
			seq, counts, beyond := stepped(t, s, n)
			full, sum := computeBoth(t, s, n)
			if !slices.Equal(full.Sequence, seq) || full.SequenceTruncated {
				t.Fatalf("%s at %d: ComputeWith's sequence is not the engine's steps", text, n)
			}
			if sum.Sequence != nil || !slices.Equal(slices.Collect(sum.Pods()), seq) {
				t.Fatalf("%s at %d: Summarize holds %d pods, or yields other steps than the engine's", text, n, len(sum.Sequence))
			}
			for _, r := range []*Result{full, sum} {
				for i, key := range r.Groups {
					if r.Counts[key] != counts[i] || r.Details[i].Count != counts[i] {
						t.Fatalf("%s at %d: group %s counts %d (details %d), %d steps give %d", text, n, key, r.Counts[key], r.Details[i].Count, n, counts[i])
					}
				}
				if r.BeyondCaps != beyond {
					t.Fatalf("%s at %d: %d beyond caps, %d steps give %d", text, n, r.BeyondCaps, n, beyond)
				}
			}
		}
	}
}

// encoded is the result as the encoders write it whole: what WriteJSON and
// WriteYAML must write, a pod at a time.
func encoded(t *testing.T, v any) (string, string) {
	t.Helper()
	var j bytes.Buffer
	enc := json.NewEncoder(&j)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	y, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return j.String(), string(y)
}

func written(t *testing.T, write func(*bytes.Buffer) error) string {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// WriteJSON, WriteYAML and WriteWide of a result that holds no sequence
// write what the encoders write of one that holds it all; after KeepFirst,
// what they write of the first pods, with sequenceTruncated.
func TestWriteStreamsSequence(t *testing.T) {
	for _, text := range streamStrategies {
		s := parse(t, text)
		for _, n := range []int{0, 1, 9, 300} {
			full, sum := computeBoth(t, s, n)
			wantJSON, wantYAML := encoded(t, full)
			for _, r := range []*Result{full, sum} {
				if got := written(t, func(b *bytes.Buffer) error { return r.WriteJSON(b) }); got != wantJSON {
					t.Errorf("%s at %d: WriteJSON (sequence held: %v)\n%s\nwant\n%s", text, n, r.Sequence != nil, got, wantJSON)
				}
				if got := written(t, func(b *bytes.Buffer) error { return r.WriteYAML(b) }); got != wantYAML {
					t.Errorf("%s at %d: WriteYAML (sequence held: %v)\n%s\nwant\n%s", text, n, r.Sequence != nil, got, wantYAML)
				}
			}
			if got, want := written(t, func(b *bytes.Buffer) error { return sum.WriteWide(b) }), written(t, func(b *bytes.Buffer) error { return full.WriteWide(b) }); got != want {
				t.Errorf("%s at %d: WriteWide\n%s\nwant\n%s", text, n, got, want)
			}
		}
	}
	// The order line as it reads: "-" beyond caps; the first pods only
	// after KeepFirst.
	r, err := Summarize(parse(t, streamStrategies[3]), 12, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := written(t, func(b *bytes.Buffer) error { return r.WriteTable(b) }); !strings.HasSuffix(got, "\norder (group # of pod 1..12): 0 1 0 1 1 0 1 1 0 1 - -\n") {
		t.Errorf("table:\n%s", got)
	}
	r.KeepFirst(5)
	if got := written(t, func(b *bytes.Buffer) error { return r.WriteWide(b) }); !strings.HasSuffix(got, "\norder (group # of pod 1..5 of 12): 0 1 0 1 1\n") {
		t.Errorf("wide, the first 5 pods:\n%s", got)
	}
	wantJSON, wantYAML := encoded(t, r)
	if got := written(t, func(b *bytes.Buffer) error { return r.WriteJSON(b) }); got != wantJSON || !strings.Contains(got, "\"sequenceTruncated\": true") {
		t.Errorf("WriteJSON, the first 5 pods:\n%s\nwant\n%s", got, wantJSON)
	}
	if got := written(t, func(b *bytes.Buffer) error { return r.WriteYAML(b) }); got != wantYAML {
		t.Errorf("WriteYAML, the first 5 pods:\n%s\nwant\n%s", got, wantYAML)
	}
}

// deployments are n Deployments: the AWS sample's strategy, a capped one,
// and one nothing places, in turn.
func deployments(t testing.TB, n int) *Manifests {
	t.Helper()
	var sb strings.Builder
	for i := range n {
		annots := ""
		switch i % 3 {
		case 0:
			annots = fmt.Sprintf("\n  annotations: {apportion.dev/strategy: %q}", streamStrategies[0])
		case 1:
			annots = fmt.Sprintf("\n  annotations: {apportion.dev/strategy: %q}", streamStrategies[3])
		}
		fmt.Fprintf(&sb, "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-%d\n  namespace: shop%s\nspec:\n  replicas: 3\n", i, annots)
	}
	m := NewManifests("default")
	if err := m.Read(strings.NewReader(sb.String()), "deployments.yaml"); err != nil {
		t.Fatal(err)
	}
	return m
}

// A preview of manifests keeps, per workload, the first PreviewPods pods'
// groups at most: what it holds, and writes, is the same at 5,000 replicas
// as at MaxReplicas; the counts are those at the replicas all the same.
func TestPreviewSequenceBounded(t *testing.T) {
	m := deployments(t, 3)
	kept := map[int][]int{}
	lines := map[int]int{}
	for _, replicas := range []int{10, 5000, MaxReplicas} {
		previews, err := m.Preview(replicas, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range previews {
			p := &previews[i]
			if i%3 == 2 {
				if p.Result != nil {
					t.Fatalf("%s: a preview of a workload nothing places", p)
				}
				continue
			}
			want := min(replicas, PreviewPods)
			if len(p.Sequence) != want || cap(p.Sequence) != want || p.SequenceTruncated != (replicas > PreviewPods) {
				t.Errorf("%s at %d replicas: keeps %d pods (capacity %d, truncated %v), want %d", p, replicas, len(p.Sequence), cap(p.Sequence), p.SequenceTruncated, want)
			}
			kept[replicas] = append(kept[replicas], len(p.Sequence), cap(p.Sequence))
			var total int64
			for _, c := range p.Counts {
				total += c
			}
			if total+p.BeyondCaps != int64(replicas) {
				t.Errorf("%s at %d replicas: counts %v and %d beyond caps", p, replicas, p.Counts, p.BeyondCaps)
			}
		}
		lines[replicas] = strings.Count(written(t, func(b *bytes.Buffer) error { return WritePreviewsJSON(b, previews) }), "\n")
	}
	if !slices.Equal(kept[5000], kept[MaxReplicas]) || lines[5000] != lines[MaxReplicas] {
		t.Errorf("what a preview keeps grows with the replicas: sequences (length, capacity) %v at 5000, %v at %d; %d and %d lines of JSON",
			kept[5000], kept[MaxReplicas], MaxReplicas, lines[5000], lines[MaxReplicas])
	}
}

// WritePreviewsJSON and WritePreviewsYAML, a workload at a time, write what
// the encoders write of the whole.
func TestWritePreviewsStreamed(t *testing.T) {
	m := deployments(t, 4)
	// A strategy that does not parse: an error.
	m.Workloads[3].Annotations = map[string]string{"apportion.dev/strategy": "a=b,weight=x"}
	for _, replicas := range []int{0, 7, 1500} {
		previews, err := m.Preview(replicas, nil)
		if err != nil {
			t.Fatal(err)
		}
		if previews[3].Invalid == "" {
			t.Fatalf("no error for an invalid strategy: %+v", previews[3])
		}
		for _, ps := range [][]WorkloadPreview{previews, previews[:0], nil} {
			wantJSON, wantYAML := encoded(t, Previews{Workloads: ps})
			if got := written(t, func(b *bytes.Buffer) error { return WritePreviewsJSON(b, ps) }); got != wantJSON {
				t.Errorf("%d previews at %d replicas: JSON\n%s\nwant\n%s", len(ps), replicas, got, wantJSON)
			}
			if got := written(t, func(b *bytes.Buffer) error { return WritePreviewsYAML(b, ps) }); got != wantYAML {
				t.Errorf("%d previews at %d replicas: YAML\n%s\nwant\n%s", len(ps), replicas, got, wantYAML)
			}
		}
	}
}
