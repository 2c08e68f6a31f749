// Package split tells how a workload's Running pods are spread over its
// strategy's groups now, next to the split the quota method gives at its
// replica count: the numbers `apportion explain` and `apportion status`
// print and the drift controller watches. It is pure: callers gather the
// workload's replica count, which groups a NodePool serves, and the labels
// of the nodes its Running pods are on.
//
// A Running pod counts in the first group, in strategy order, whose labels
// its node carries (as PlacementPolicy status counts it); a pod on a node of
// no group counts as unmatched.
//
// With caps, the pods beyond caps carry no group and may run anywhere: as
// many pods as are beyond caps at the Running count may run past their
// group's quota or on nodes of no group without the split drifting. A pod
// the placement controller released beyond caps says so
// (decision.ReleasedBeyondCaps): it counts in no group, whatever its node,
// only against that allowance, so that a capped group whose nodes run it is
// not taken for full.
package split

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
)

// Input is what is known of one workload.
type Input struct {
	Strategy *compiled.Strategy
	// Replicas is the workload's spec.replicas.
	Replicas int64
	// LeftOut says, per group (indexed like the strategy's groups), why
	// the group is left out of the split now ("" or a short index: served).
	LeftOut []string
	// NodeLabels holds, for each Running pod, the labels of its node; but
	// for the pods released beyond caps, which BeyondCaps counts.
	NodeLabels []map[string]string
	// BeyondCaps counts the Running pods released beyond caps
	// (decision.ReleasedBeyondCaps), in no group whatever their node.
	BeyondCaps int64
}

// Group is one group of the split.
type Group struct {
	// Key is the group's key (its labels as key=value joined by ",").
	Key string `json:"key"`
	// LeftOut says why no pod is sent to the group now; "" when served.
	LeftOut string `json:"leftOut,omitempty"`
	// Desired is the quota method's count at Replicas over the served
	// groups.
	Desired int64 `json:"desired"`
	// Actual counts the Running pods on the group's nodes, but for those
	// released beyond caps.
	Actual int64 `json:"actual"`
	// Min and Max bound Actual within quota at the Running count: the
	// floor and ceiling of the group's ideal share over the served groups
	// (both 0 for a group left out), "floor" and "ceiling" in JSON as in
	// `apportion plan`: "max" is the strategy's word for a cap.
	Min int64 `json:"floor"`
	Max int64 `json:"ceiling"`
	// Cap is the group's cap (max=N), 0 for none.
	Cap int32 `json:"cap,omitempty"`
}

// Within reports whether the group's Running count is within quota.
func (g Group) Within() bool { return g.Actual >= g.Min && g.Actual <= g.Max }

// Split is a workload's split now.
type Split struct {
	Groups []Group `json:"groups"`
	// Replicas is the workload's spec.replicas; Running its Running pods.
	Replicas int64 `json:"replicas"`
	Running  int64 `json:"running"`
	// Unmatched counts the Running pods on nodes of no group.
	Unmatched int64 `json:"unmatched,omitempty"`
	// BeyondCaps is the number of pods past every cap at Replicas, which
	// no group takes (in no Desired); RunningBeyondCaps the same at the
	// Running count, the pods that may run outside their group's quota
	// (the Running pods released beyond caps among them).
	BeyondCaps        int64 `json:"beyondCaps,omitempty"`
	RunningBeyondCaps int64 `json:"runningBeyondCaps,omitempty"`
	// WithinQuota holds when every served group's Running count is within
	// quota at the Running count, no pod runs in a group left out or
	// outside every group (but for the pods beyond caps), and some group is
	// served.
	WithinQuota bool `json:"withinQuota"`
	// LeftOut is true when some group is left out of the split.
	LeftOut bool `json:"leftOut"`
}

// Drifting reports whether the workload is off its strategy: outside quota,
// or with a group left out.
func (s Split) Drifting() bool { return !s.WithinQuota || s.LeftOut }

// Available is the set of the groups served: those leftOut gives no
// reason for.
func Available(leftOut []string, groups int) apportion.Set {
	avail := apportion.All
	for i := 0; i < groups && i < len(leftOut); i++ {
		if leftOut[i] != "" {
			avail = avail.Without(i)
		}
	}
	return avail
}

// Compute computes the split of in.
func Compute(in Input) Split {
	s := in.Strategy
	n := len(s.Strategy.Groups)
	avail := Available(in.LeftOut, n)
	out := Split{Groups: make([]Group, n), Replicas: in.Replicas}
	actual, unmatched := Count(s, in.NodeLabels)
	out.Unmatched = unmatched
	anyServed := false
	for i := range n {
		out.Groups[i] = Group{Key: s.Strategy.Groups[i].Key(), Actual: actual[i], Cap: s.Strategy.Groups[i].Max}
		if i < len(in.LeftOut) && in.LeftOut[i] != "" {
			out.Groups[i].LeftOut = in.LeftOut[i]
			out.LeftOut = true
			continue
		}
		anyServed = true
	}
	var running int64
	for _, c := range actual {
		running += c
	}
	released := max(in.BeyondCaps, 0)
	out.Running = running + unmatched + released
	if !anyServed {
		return out
	}
	desired := s.Method.CountsAt(max(in.Replicas, 0), avail)
	out.BeyondCaps = s.Method.Beyond(max(in.Replicas, 0), avail)
	// Bounds at the Running count in served groups: pods elsewhere are
	// drift of their own, not part of the count the quota is taken at;
	// unless some are beyond caps, which run anywhere.
	var served int64
	for i := range n {
		if avail.Has(i) {
			served += actual[i]
		}
	}
	at := served
	if b := s.Method.Beyond(served+unmatched+released, avail); b > 0 {
		at, out.RunningBeyondCaps = served+unmatched+released, b
	}
	shares := s.Method.Shares(at, avail)
	// The pods past their group's quota or on nodes of no group, beyond
	// caps or not, and those released beyond caps.
	excess := unmatched + released
	out.WithinQuota = true
	for i := range n {
		g := &out.Groups[i]
		g.Desired = desired[i]
		if avail.Has(i) {
			g.Min, g.Max = shares[i].Lower, shares[i].Upper()
		}
		excess += max(0, g.Actual-g.Max)
		out.WithinQuota = out.WithinQuota && g.Actual >= g.Min
	}
	out.WithinQuota = out.WithinQuota && excess <= out.RunningBeyondCaps
	return out
}

// Count counts Running pods per group by their nodes' labels: in the first
// group whose labels the node carries; unmatched counts those in none.
func Count(s *compiled.Strategy, nodeLabels []map[string]string) (actual []int64, unmatched int64) {
	groupOf := Matcher(s)
	actual = make([]int64, len(s.Strategy.Groups))
	for _, nl := range nodeLabels {
		gi := groupOf(nl)
		if gi < 0 {
			unmatched++
			continue
		}
		actual[gi]++
	}
	return actual, unmatched
}

// Matcher returns the function that places a node, by its labels, in the
// first group (its index, in strategy order) whose labels it carries; -1
// for none.
func Matcher(s *compiled.Strategy) func(nodeLabels map[string]string) int {
	selectors := make([]labels.Selector, len(s.Strategy.Groups))
	for i, g := range s.Strategy.Groups {
		selectors[i] = labels.SelectorFromSet(g.Selector())
	}
	return func(nodeLabels map[string]string) int {
		return slices.IndexFunc(selectors, func(sel labels.Selector) bool { return sel.Matches(labels.Set(nodeLabels)) })
	}
}

// Next lists the groups (indexes) the next k pods would get after counts,
// over avail, apportion.BeyondCaps for a pod beyond caps; it stops early
// when no group is available.
func Next(s *compiled.Strategy, counts []int64, avail apportion.Set, k int) []int {
	c := slices.Clone(counts)
	out := make([]int, 0, k)
	for range k {
		g := s.Method.Next(c, avail)
		if g == apportion.BeyondCaps {
			out = append(out, g)
			continue
		}
		if g < 0 {
			break
		}
		out = append(out, g)
		c[g]++
	}
	return out
}

// Describe is the split in one line for Events and logs:
// "on-demand 10 running (quota 4-4, want 4 at 10 replicas), spot 0 ...".
func (s Split) Describe() string {
	parts := make([]string, 0, len(s.Groups)+1)
	for i, g := range s.Groups {
		if g.LeftOut != "" {
			parts = append(parts, fmt.Sprintf("group %d (%s) %d running, left out: %s", i+1, g.Key, g.Actual, g.LeftOut))
			continue
		}
		parts = append(parts, fmt.Sprintf("group %d (%s) %d running, quota %s, %s wanted at %d replicas", i+1, g.Key, g.Actual, Bounds(g.Min, g.Max), WithCap(g.Desired, g.Cap), s.Replicas))
	}
	if s.Unmatched > 0 {
		parts = append(parts, fmt.Sprintf("%d running on nodes of no group", s.Unmatched))
	}
	if s.BeyondCaps > 0 {
		parts = append(parts, fmt.Sprintf("%d beyond caps at %d replicas", s.BeyondCaps, s.Replicas))
	}
	return strings.Join(parts, "; ")
}

// WithCap writes a group's count with its cap, when it has one: "2 (cap
// 2)".
func WithCap(n int64, maxPods int32) string {
	if maxPods == 0 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d (cap %d)", n, maxPods)
}

// Bounds writes a quota's floor and ceiling: "4", or "4-5".
func Bounds(lo, hi int64) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}
