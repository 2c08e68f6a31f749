package plan

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"strconv"

	"sigs.k8s.io/yaml"
)

// KeepFirst makes Sequence hold the groups of the first n pods (all of them
// when n is Replicas or more), SequenceTruncated saying when that is fewer
// than Replicas: what the result keeps, and its writers write, is then
// O(n) whatever the replicas.
func (r *Result) KeepFirst(n int) {
	n = max(min(n, r.Replicas), 0)
	seq := make([]int, 0, n)
	for gi := range r.step(n) {
		seq = append(seq, gi)
	}
	r.Sequence, r.SequenceTruncated, r.streamed = seq, n < r.Replicas, false
}

// Pods yields what the writers write as the sequence: the group index of
// each pod 1..Replicas, stepping the engine again (O(groups) memory), for a
// result of Summarize; Sequence otherwise.
func (r *Result) Pods() iter.Seq[int] {
	if r.streamed {
		return r.step(r.Replicas)
	}
	return func(yield func(int) bool) {
		for _, gi := range r.Sequence {
			if !yield(gi) {
				return
			}
		}
	}
}

// step yields the group of pods 1..n as the engine places them one at a
// time over the available groups, -1 for a pod beyond caps.
func (r *Result) step(n int) iter.Seq[int] {
	return func(yield func(int) bool) {
		if r.method == nil {
			return
		}
		counts := make([]int64, r.method.Len())
		for range n {
			gi := r.method.Next(counts, r.avail)
			if gi < 0 {
				gi = -1
			} else {
				counts[gi]++
			}
			if !yield(gi) {
				return
			}
		}
	}
}

// WriteJSON writes the result as one indented JSON object, the keys in
// their declared order. The sequence is written as Pods yields it, a pod at
// a time through a buffer: never held whole, in memory or as text.
func (r *Result) WriteJSON(w io.Writer) error {
	return r.writeSpliced(w, func(v any) ([]byte, error) { return json.MarshalIndent(v, "", "  ") },
		sequenceFormat{empty: "\n  \"sequence\": []", open: "\n  \"sequence\": [\n    ", sep: ",\n    ", close: "\n  ]"}, "\n")
}

// WriteYAML writes the result as YAML, as sigs.k8s.io/yaml writes it (the
// keys sorted), the sequence streamed as WriteJSON streams it.
func (r *Result) WriteYAML(w io.Writer) error {
	return r.writeSpliced(w, yaml.Marshal, sequenceFormat{empty: "\nsequence: []\n", open: "\nsequence:\n- ", sep: "\n- ", close: "\n"}, "")
}

// sequenceFormat is how an encoding writes the sequence at the top level of
// the result: empty is the empty sequence as the encoder writes it (from a
// newline, unique at that indentation), and a sequence of pods is open,
// the pods separated by sep, then close.
type sequenceFormat struct {
	empty, open, sep, close string
}

// writeSpliced writes the result marshalled with an empty sequence, the
// sequence written in its place, then end.
func (r *Result) writeSpliced(w io.Writer, marshal func(any) ([]byte, error), f sequenceFormat, end string) error {
	rest := *r
	rest.Sequence = []int{}
	b, err := marshal(&rest)
	if err != nil {
		return err
	}
	at := bytes.Index(b, []byte(f.empty))
	if at < 0 {
		return fmt.Errorf("encoding the preview: no %q in %q", f.empty, b)
	}
	bw := bufio.NewWriter(w)
	_, _ = bw.Write(b[:at])
	first := true
	var num []byte
	for gi := range r.Pods() {
		if first {
			_, _ = bw.WriteString(f.open)
			first = false
		} else {
			_, _ = bw.WriteString(f.sep)
		}
		num = strconv.AppendInt(num[:0], int64(gi), 10)
		_, _ = bw.Write(num)
	}
	if first {
		_, _ = bw.WriteString(f.empty)
	} else {
		_, _ = bw.WriteString(f.close)
	}
	_, _ = bw.Write(b[at+len(f.empty):])
	_, _ = bw.WriteString(end)
	return bw.Flush()
}

// writeOrder writes the table's line of the group of each pod ("-" beyond
// caps), streamed as WriteJSON streams the sequence.
func (r *Result) writeOrder(w io.Writer) error {
	bw := bufio.NewWriter(w)
	if r.SequenceTruncated {
		fmt.Fprintf(bw, "\norder (group # of pod 1..%d of %d):", len(r.Sequence), r.Replicas)
	} else {
		fmt.Fprintf(bw, "\norder (group # of pod 1..%d):", r.Replicas)
	}
	var num []byte
	for gi := range r.Pods() {
		num = append(num[:0], ' ')
		if gi < 0 {
			num = append(num, '-')
		} else {
			num = strconv.AppendInt(num, int64(gi), 10)
		}
		_, _ = bw.Write(num)
	}
	_ = bw.WriteByte('\n')
	return bw.Flush()
}

// writePreviewsJSON writes previews as json.Encoder with an indent of two
// spaces writes Previews, one workload marshalled at a time.
func writePreviewsJSON(w io.Writer, previews []WorkloadPreview) error {
	bw := bufio.NewWriter(w)
	_, _ = bw.WriteString("{\n  \"workloads\": ")
	switch {
	case previews == nil:
		_, _ = bw.WriteString("null")
	case len(previews) == 0:
		_, _ = bw.WriteString("[]")
	default:
		_, _ = bw.WriteString("[")
		for i := range previews {
			b, err := json.MarshalIndent(&previews[i], "    ", "  ")
			if err != nil {
				return err
			}
			if i > 0 {
				_ = bw.WriteByte(',')
			}
			_, _ = bw.WriteString("\n    ")
			_, _ = bw.Write(b)
		}
		_, _ = bw.WriteString("\n  ]")
	}
	_, _ = bw.WriteString("\n}\n")
	return bw.Flush()
}

// WritePreviewsYAML writes previews as sigs.k8s.io/yaml writes Previews,
// one workload marshalled at a time.
func WritePreviewsYAML(w io.Writer, previews []WorkloadPreview) error {
	bw := bufio.NewWriter(w)
	if len(previews) == 0 {
		empty := "[]"
		if previews == nil {
			empty = "null"
		}
		_, _ = bw.WriteString("workloads: " + empty + "\n")
		return bw.Flush()
	}
	const head = "workloads:\n"
	_, _ = bw.WriteString(head)
	for i := range previews {
		// Marshalled in a list of its own, its lines are indented, and
		// long strings folded, as in the whole.
		b, err := yaml.Marshal(Previews{Workloads: previews[i : i+1]})
		if err != nil {
			return err
		}
		if !bytes.HasPrefix(b, []byte(head)) {
			return fmt.Errorf("encoding the preview of %s: %q", &previews[i], b)
		}
		_, _ = bw.Write(b[len(head):])
	}
	return bw.Flush()
}
