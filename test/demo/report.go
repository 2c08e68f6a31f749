package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Rows for pods that belong to no group of the strategy. They are wanted
// nowhere, so any pod in them is a miss.
const (
	noGroup      = "(no group)"
	notScheduled = "(not scheduled)"
)

// section is one Deployment's part of the table.
type section struct {
	name     string // namespace/name
	replicas int
	running  int
	placed   int // pods carrying apportion's decision
	rows     []row
	note     string // why there is no split to compare with, if so
}

// row is one group: what the cluster shows, next to what the plan wants.
type row struct {
	group string
	pools map[string]bool // NodePools of the nodes the pods run on
	kinds map[string]bool // capacity-type/arch of those nodes
	nodes map[string]bool
	pods  int
	// lo and hi are the floor and ceiling of the group's ideal share: the
	// quota property allows either (a scale-down may end on the other one
	// than a scale-up from zero).
	lo, hi int64
	// planPool is the NodePool the plan expects for the group, when known.
	planPool string
	// leftOut: no NodePool serves the group, so the plan gives it nothing.
	leftOut bool
}

func newRow(group string, planPool string) *row {
	return &row{group: group, planPool: planPool,
		pools: map[string]bool{}, kinds: map[string]bool{}, nodes: map[string]bool{}}
}

// ok: the group is within quota (floor or ceiling of its ideal share), on
// the NodePool the plan names (when it names one: without Karpenter there is
// none).
func (r row) ok() bool {
	if int64(r.pods) < r.lo || int64(r.pods) > r.hi {
		return false
	}
	return r.planPool == "" || r.pods == 0 || (len(r.pools) == 1 && r.pools[r.planPool])
}

// wantText is the allowed count: "4", or "3-4" when the ideal share is
// fractional.
func (r row) wantText() string {
	if r.lo == r.hi {
		return fmt.Sprint(r.lo)
	}
	return fmt.Sprintf("%d-%d", r.lo, r.hi)
}

// buildSection sorts the pods of one Deployment into the groups of s by the
// labels of the nodes they run on: the cluster's own record, not apportion's
// annotation, so a pod on the wrong node shows up as such. The annotation only
// settles which group a pod counts for when its node matches several.
// want is the plan for the Deployment's replicas; s and want may be nil when
// the Deployment has no valid strategy.
func buildSection(name string, replicas int, s *strategy.Strategy, want *plan.Result, pods []corev1.Pod, nodes map[string]*corev1.Node) section {
	sec := section{name: name, replicas: replicas}
	byGroup := map[string]*row{}
	var order []string
	add := func(r *row) {
		byGroup[r.group] = r
		order = append(order, r.group)
	}
	if s != nil {
		for i, g := range s.Groups {
			r := newRow(g.Key(), "")
			if want != nil {
				d := want.Details[i]
				r.lo, r.hi, r.planPool, r.leftOut = d.Lower, d.Upper, d.NodePool, d.Unavailable != ""
			}
			add(r)
		}
	}
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodRunning {
			sec.running++
		}
		if p.Annotations[annotations.Group] != "" {
			sec.placed++
		}
		node := nodes[p.Spec.NodeName]
		key := notScheduled
		if node != nil {
			key = groupOf(s, p, node)
		}
		r := byGroup[key]
		if r == nil {
			r = newRow(key, "")
			add(r)
		}
		r.pods++
		if node != nil {
			r.nodes[node.Name] = true
			r.pools[orDash(node.Labels[karpv1.NodePoolLabelKey])] = true
			r.kinds[orDash(node.Labels[karpv1.CapacityTypeLabelKey])+"/"+orDash(node.Labels[corev1.LabelArchStable])] = true
		}
	}
	for _, k := range order {
		sec.rows = append(sec.rows, *byGroup[k])
	}
	return sec
}

// groupOf names the group whose labels the node carries. Overlapping groups
// (say, on-demand and arm64) can both match one node; then the pod's decision
// picks among them, else the first written wins.
func groupOf(s *strategy.Strategy, p *corev1.Pod, node *corev1.Node) string {
	if s == nil {
		return noGroup
	}
	var matches []string
	for _, g := range s.Groups {
		if hasLabels(node.Labels, g.Selector()) {
			matches = append(matches, g.Key())
		}
	}
	switch {
	case len(matches) == 0:
		return noGroup
	case slices.Contains(matches, p.Annotations[annotations.Group]):
		return p.Annotations[annotations.Group]
	default:
		return matches[0]
	}
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// render writes the table: one block per Deployment, one line per group.
// It returns how many Deployments are off their split.
func render(w io.Writer, sections []section) (off int, err error) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, sec := range sections {
		fmt.Fprintf(tw, "%s: %d/%d Running, %d/%d placed by apportion\n", sec.name, sec.running, sec.replicas, sec.placed, sec.replicas)
		if sec.note != "" {
			fmt.Fprintf(tw, "  %s\n", sec.note)
		}
		fmt.Fprintln(tw, "  GROUP\tNODEPOOL\tCAPACITY/ARCH\tNODES\tPODS\tQUOTA")
		bad := false
		for _, r := range sec.rows {
			mark := "✓"
			if !r.ok() {
				mark, bad = "✗", true
			}
			pools := join(r.pools)
			switch {
			case r.leftOut && r.pods == 0:
				pools = "(no NodePool serves it)"
			case r.planPool != "" && r.pods > 0 && pools != r.planPool:
				pools += " (plan: " + r.planPool + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%s %s\n", r.group, pools, join(r.kinds), len(r.nodes), r.pods, r.wantText(), mark)
		}
		if bad || sec.note != "" {
			off++
		}
	}
	if err := tw.Flush(); err != nil {
		return off, fmt.Errorf("writing the table: %w", err)
	}
	return off, nil
}

func join(set map[string]bool) string {
	if len(set) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
