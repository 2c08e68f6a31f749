// Package plan previews a strategy offline: the group every pod 1..n goes to,
// the counts per group and each group's ideal share, exactly as the webhook
// would decide them for a workload scaled up one pod at a time.
package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// MaxReplicas bounds a preview; far above any real workload, low enough that
// a typo cannot make the command run for minutes.
const MaxReplicas = 1_000_000

// Result is the preview of one strategy at one replica count. Its JSON form is
// the contract of `apportion plan -o json`.
type Result struct {
	Strategy string `json:"strategy"`
	Replicas int    `json:"replicas"`
	// Groups are the group keys (labels as key=value joined by ','), in
	// strategy order.
	Groups []string `json:"groups"`
	// Sequence holds, for pods 1..Replicas in order, the 0-based index into
	// Groups of the group the pod goes to.
	Sequence []int `json:"sequence"`
	// Counts maps each group key to its number of pods.
	Counts map[string]int64 `json:"counts"`
	// Details is one entry per group, in strategy order.
	Details []Group `json:"details"`
	// Source says where the strategy was read from, when it came from a file.
	Source string `json:"source,omitempty"`
}

// Group is one group's line of the preview.
type Group struct {
	Key    string            `json:"key"`
	Labels map[string]string `json:"labels"`
	Base   int32             `json:"base"`
	Weight int32             `json:"weight"`
	// Ideal is the exact share as a decimal; Lower and Upper are its floor
	// and ceiling, the bounds Count always stays within.
	Ideal float64 `json:"ideal"`
	Lower int64   `json:"lower"`
	Upper int64   `json:"upper"`
	Count int64   `json:"count"`
}

// Method builds the apportioning engine for a parsed strategy.
func Method(s *strategy.Strategy) (*apportion.Method, error) {
	groups := make([]apportion.Group, len(s.Groups))
	for i, g := range s.Groups {
		groups[i] = apportion.Group{Base: int64(g.Base), Weight: int64(g.Weight)}
	}
	return apportion.New(groups)
}

// Compute previews s at the given number of replicas.
func Compute(s *strategy.Strategy, replicas int) (*Result, error) {
	if replicas < 0 || replicas > MaxReplicas {
		return nil, fmt.Errorf("replicas must be between 0 and %d, got %d", MaxReplicas, replicas)
	}
	m, err := Method(s)
	if err != nil {
		return nil, fmt.Errorf("building apportioning method: %w", err)
	}
	seq := m.Sequence(replicas)
	counts := make([]int64, m.Len())
	for _, gi := range seq {
		counts[gi]++
	}
	shares := m.Shares(int64(replicas), apportion.All)
	r := &Result{
		Strategy: s.String(),
		Replicas: replicas,
		Groups:   s.Keys(),
		Sequence: seq,
		Counts:   make(map[string]int64, len(s.Groups)),
		Details:  make([]Group, len(s.Groups)),
	}
	for i, g := range s.Groups {
		r.Counts[r.Groups[i]] = counts[i]
		r.Details[i] = Group{
			Key:    r.Groups[i],
			Labels: g.Selector(),
			Base:   g.Base,
			Weight: g.Weight,
			Ideal:  shares[i].Float(),
			Lower:  shares[i].Lower,
			Upper:  shares[i].Upper(),
			Count:  counts[i],
		}
	}
	return r, nil
}

// WriteJSON writes the result as one indented JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the result for a person: one line per group.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if r.Source != "" {
		fmt.Fprintf(tw, "source:\t%s\n", r.Source)
	}
	fmt.Fprintf(tw, "strategy:\t%s\nreplicas:\t%d\n\n", r.Strategy, r.Replicas)
	fmt.Fprintln(tw, "#\tGROUP\tBASE\tWEIGHT\tIDEAL\tCOUNT")
	for i, g := range r.Details {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%d\n", i, g.Key, g.Base, g.Weight, formatShare(g.Ideal), g.Count)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Sequence) > 0 && len(r.Sequence) <= 100 {
		parts := make([]string, len(r.Sequence))
		for i, gi := range r.Sequence {
			parts[i] = strconv.Itoa(gi)
		}
		_, err := fmt.Fprintf(w, "\norder (group # of pod 1..%d): %s\n", len(r.Sequence), strings.Join(parts, " "))
		return err
	}
	return nil
}

func formatShare(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}
