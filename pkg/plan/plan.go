// Package plan previews a strategy offline: the group every pod 1..n goes to,
// the counts per group and each group's ideal share, exactly as the webhook
// would decide them for a workload scaled up one pod at a time.
package plan

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// MaxReplicas bounds a preview; far above any real workload, low enough that
// a typo cannot make the command run for minutes, nor print more than a few
// megabytes of sequence.
const MaxReplicas = 1_000_000

// PreviewPods is the most pods of each workload whose group a preview of
// manifests keeps (Result.KeepFirst): its memory does not grow with the
// replicas, whatever their number.
const PreviewPods = 1000

// ErrNoGroupServed is returned, wrapped, when no NodePool of the catalog
// serves any group of the strategy.
var ErrNoGroupServed = errors.New("no NodePool serves any group of the strategy")

// Result is the preview of one strategy at one replica count. Its JSON form is
// the contract of `apportion plan -o json`.
type Result struct {
	Strategy string `json:"strategy"`
	Replicas int    `json:"replicas"`
	// Groups are the group keys (labels as key=value joined by ','), in
	// strategy order.
	Groups []string `json:"groups"`
	// Sequence holds, for pods 1..Replicas in order, the 0-based index into
	// Groups of the group the pod goes to, -1 for a pod beyond caps:
	// every pod from ComputeWith. From Summarize it is nil, and the writers
	// step the engine again for every pod as they write (Pods); after
	// KeepFirst it holds the first pods only (SequenceTruncated).
	Sequence []int `json:"sequence"`
	// SequenceTruncated says that Sequence holds fewer pods than Replicas:
	// the first ones.
	SequenceTruncated bool `json:"sequenceTruncated,omitempty"`
	// Counts maps each group key to its number of pods.
	Counts map[string]int64 `json:"counts"`
	// BeyondCaps is the number of pods no group takes because every group
	// with a weight is at its cap (max): they are placed without a group.
	BeyondCaps int64 `json:"beyondCaps,omitempty"`
	// Details is one entry per group, in strategy order.
	Details []Group `json:"details"`
	// Source says where the strategy was read from, when it came from a file.
	Source string `json:"source,omitempty"`
	// Mode is the workload's placement mode, in a preview of manifests.
	Mode string `json:"mode,omitempty"`

	// method and avail step the engine again (Pods); streamed is whether
	// the writers do so for every pod, Sequence being nil.
	method   *apportion.Method
	avail    apportion.Set
	streamed bool
}

// Options refine a preview.
type Options struct {
	// Catalog, when set, maps each group to the NodePool that serves it;
	// groups no NodePool serves are left out of the split.
	Catalog *catalog.Catalog
	// Pod carries the workload's own constraints (nodeSelector, required
	// affinity, tolerations) for NodePool selection; may be nil.
	Pod *corev1.Pod
}

// Group is one group's line of the preview. Its JSON keys are those of
// the same numbers in `apportion explain -o json` and `status -o json`.
type Group struct {
	Key    string            `json:"key"`
	Labels map[string]string `json:"labels"`
	Base   int32             `json:"base"`
	Weight int32             `json:"weight"`
	// Max is the group's cap, the strategy's max=N, 0 for none: "cap" in
	// JSON and in the table ("2 (cap 2)"), as explain says it.
	Max int32 `json:"cap,omitempty"`
	// Ideal is the exact share as a decimal; Lower and Upper are its floor
	// and ceiling ("floor" and "ceiling" in JSON, FLOOR and CEILING in the
	// table), the bounds Count always stays within. Count is the group's
	// pods ("desired", DESIRED: the quota method's count, as explain and
	// status say it).
	Ideal float64 `json:"ideal"`
	Lower int64   `json:"floor"`
	Upper int64   `json:"ceiling"`
	Count int64   `json:"desired"`
	// NodePool is the pool serving the group, with --nodepools.
	NodePool    string              `json:"nodePool,omitempty"`
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Unavailable explains why no NodePool serves the group; such a group
	// gets no pods and the others share its part ("leftOut", as explain
	// says it).
	Unavailable string `json:"leftOut,omitempty"`
}

// Method builds the apportioning engine for a parsed strategy, as the
// controllers do (pkg/compiled); the e2e suites compute their expectations
// with it.
func Method(s *strategy.Strategy) (*apportion.Method, error) {
	c, err := compiled.New(s)
	if err != nil {
		return nil, err
	}
	return c.Method, nil
}

// Compute previews s at the given number of replicas, every group available.
func Compute(s *strategy.Strategy, replicas int) (*Result, error) {
	return ComputeWith(s, replicas, Options{})
}

// ComputeWith previews s at the given number of replicas, with the group
// of every pod in Sequence: replicas ints. Summarize holds none.
func ComputeWith(s *strategy.Strategy, replicas int, opts Options) (*Result, error) {
	r, err := Summarize(s, replicas, opts)
	if err != nil {
		return nil, err
	}
	r.KeepFirst(replicas)
	return r, nil
}

// Summarize is ComputeWith but for the sequence, which it does not hold:
// the counts come from the engine at the replica count at once
// (apportion's CountsAt), so its memory is the groups' whatever the
// replicas. WriteJSON, WriteYAML and WriteWide write the group of every pod
// all the same, stepping the engine again as they write it (Pods).
func Summarize(s *strategy.Strategy, replicas int, opts Options) (*Result, error) {
	if replicas < 0 || replicas > MaxReplicas {
		return nil, fmt.Errorf("replicas must be between 0 and %d, got %d", MaxReplicas, replicas)
	}
	c, err := compiled.New(s)
	if err != nil {
		return nil, fmt.Errorf("building apportioning method: %w", err)
	}
	m := c.Method
	avail := apportion.All
	choices := make([]catalog.Choice, len(s.Groups))
	unavailable := make([]string, len(s.Groups))
	if opts.Catalog != nil {
		for i, g := range s.Groups {
			c, err := opts.Catalog.Select(g.Selector(), opts.Pod)
			if errors.Is(err, catalog.ErrNoPool) {
				err = catalog.Unused(err, opts.Catalog.Undefined(g.LabelKeys()...), "none of the NodePools")
			}
			if err != nil {
				avail = avail.Without(i)
				unavailable[i] = err.Error()
				continue
			}
			choices[i] = c
		}
		if avail&(1<<uint(len(s.Groups))-1) == 0 {
			return nil, fmt.Errorf("%w: %s", ErrNoGroupServed, strings.Join(unavailable, "; "))
		}
	}
	// What replicas steps of Next give, without the steps.
	counts := m.CountsAt(int64(replicas), avail)
	beyond := int64(replicas)
	for _, n := range counts {
		beyond -= n
	}
	shares := m.Shares(int64(replicas), avail)
	r := &Result{
		Strategy:   s.String(),
		Replicas:   replicas,
		Groups:     s.Keys(),
		Counts:     make(map[string]int64, len(s.Groups)),
		BeyondCaps: beyond,
		Details:    make([]Group, len(s.Groups)),
		method:     m,
		avail:      avail,
		streamed:   true,
	}
	for i, g := range s.Groups {
		r.Counts[r.Groups[i]] = counts[i]
		r.Details[i] = Group{
			Key:    r.Groups[i],
			Labels: g.Selector(),
			Base:   g.Base,
			Weight: g.Weight,
			Max:    g.Max,
			Ideal:  shares[i].Float(),
			Lower:  shares[i].Lower,
			Upper:  shares[i].Upper(),
			Count:  counts[i],
		}
		if choices[i].Pool != nil {
			r.Details[i].NodePool = choices[i].Pool.Name
			r.Details[i].Tolerations = choices[i].Tolerations
		}
		r.Details[i].Unavailable = unavailable[i]
	}
	return r, nil
}

// WriteTable writes the result for a person: one line per group.
func (r *Result) WriteTable(w io.Writer) error { return r.writeTable(w, false) }

// WriteWide is WriteTable with more columns: each group's floor and
// ceiling, and with NodePools the tolerations of each; the order of pods is
// printed whatever their number.
func (r *Result) WriteWide(w io.Writer) error { return r.writeTable(w, true) }

func (r *Result) writeTable(w io.Writer, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if r.Source != "" {
		fmt.Fprintf(tw, "source:\t%s\n", r.Source)
	}
	if r.Mode != "" {
		fmt.Fprintf(tw, "mode:\t%s\n", r.Mode)
	}
	fmt.Fprintf(tw, "strategy:\t%s\nreplicas:\t%d\n\n", r.Strategy, r.Replicas)
	pools := false
	for _, g := range r.Details {
		pools = pools || g.NodePool != "" || g.Unavailable != ""
	}
	fmt.Fprintln(tw, strings.Join(tableHeader(wide, pools), "\t"))
	for i := range r.Details {
		fmt.Fprintln(tw, strings.Join(r.Details[i].tableRow(i, wide, pools), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, g := range r.Details {
		if g.Unavailable != "" {
			fmt.Fprintf(w, "group %d left out: %s\n", i, g.Unavailable)
		}
	}
	if r.BeyondCaps > 0 {
		fmt.Fprintf(w, "beyond caps: %d (every group with a weight is at its cap: placed without a group)\n", r.BeyondCaps)
	}
	if r.Replicas > 0 && (wide || r.Replicas <= 100) {
		return r.writeOrder(w)
	}
	return nil
}

// tableHeader is the header of the table: NODEPOOL with pools, FLOOR and
// CEILING when wide, and TOLERATIONS when both. A column is named as the
// JSON key of its number is (pkg/cli's TestTableVocabulary).
func tableHeader(wide, pools bool) []string {
	h := []string{"#", "GROUP", "BASE", "WEIGHT"}
	if pools {
		h = append(h, "NODEPOOL")
	}
	h = append(h, "IDEAL")
	if wide {
		h = append(h, "FLOOR", "CEILING")
	}
	h = append(h, "DESIRED")
	if wide && pools {
		h = append(h, "TOLERATIONS")
	}
	return h
}

// tableRow is group i's row under tableHeader.
func (g *Group) tableRow(i int, wide, pools bool) []string {
	row := []string{strconv.Itoa(i), g.Key, strconv.Itoa(int(g.Base)), strconv.Itoa(int(g.Weight))}
	if pools {
		pool := g.NodePool
		if g.Unavailable != "" {
			pool = "(none: left out)"
		}
		row = append(row, pool)
	}
	row = append(row, formatShare(g.Ideal))
	if wide {
		row = append(row, strconv.FormatInt(g.Lower, 10), strconv.FormatInt(g.Upper, 10))
	}
	row = append(row, FormatCount(g.Count, g.Max))
	if wide && pools {
		row = append(row, formatTolerations(g.Tolerations))
	}
	return row
}

// formatTolerations writes tolerations as kubectl describe does:
// key=value:effect, key:effect for Exists, "<none>" for none.
func formatTolerations(ts []corev1.Toleration) string {
	if len(ts) == 0 {
		return "<none>"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		s := t.Key
		if t.Operator != corev1.TolerationOpExists && t.Value != "" {
			s += "=" + t.Value
		}
		if t.Effect != "" {
			s += ":" + string(t.Effect)
		}
		if s == "" {
			s = "(all taints)"
		}
		parts[i] = s
	}
	return strings.Join(parts, ",")
}

// FormatCount writes a group's desired count, with its cap (the strategy's
// max=N) when it has one: "2 (cap 3)".
func FormatCount(count int64, maxPods int32) string {
	if maxPods == 0 {
		return strconv.FormatInt(count, 10)
	}
	return fmt.Sprintf("%d (cap %d)", count, maxPods)
}

func formatShare(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}
