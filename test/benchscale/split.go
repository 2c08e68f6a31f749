package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/test/quota"
)

// notScheduled counts the pods of a workload not bound to a node (those on
// a node of no group of its strategy count under quota.NoGroup).
const notScheduled = "(not scheduled)"

// split is one workload's pods counted by the group their node's labels
// belong to, against the quota of its strategy.
type split struct {
	Workload string           `json:"workload"`
	Strategy string           `json:"strategy"`
	Counts   map[string]int64 `json:"counts"`
	// Ideal is each group's exact share, in the strategy's order.
	Ideal  []float64 `json:"ideal"`
	Within bool      `json:"withinQuota"`
	// Deviation is the largest distance of a group's count from its ideal
	// share, plus the pods in no group: below 1 when within quota.
	Deviation float64 `json:"deviation"`
}

// checkSplits counts the pods of every workload by the labels of their
// nodes (the cluster's record, not apportion's annotation) and checks the
// counts against the quota: every group within the floor and ceiling of its
// ideal share, no pod outside the groups.
func checkSplits(ws []workload, recs []podRecord, nodes map[string]map[string]string) []split {
	byWorkload := map[string][]podRecord{}
	for _, r := range recs {
		byWorkload[r.workload] = append(byWorkload[r.workload], r)
	}
	out := make([]split, 0, len(ws))
	for _, w := range ws {
		out = append(out, checkSplit(w, byWorkload[w.name], nodes))
	}
	return out
}

func checkSplit(w workload, recs []podRecord, nodes map[string]map[string]string) split {
	sp := split{Workload: w.name, Strategy: w.strategy, Counts: map[string]int64{}}
	s, err := strategy.Parse(w.strategy)
	if err != nil {
		sp.Deviation = math.Inf(1)
		return sp
	}
	for _, r := range recs {
		key := notScheduled
		if labels, ok := nodes[r.node]; ok && r.node != "" {
			key = quota.GroupOf(s, labels, r.group)
		}
		sp.Counts[key]++
	}
	keys := s.Keys()
	ordered := make([]int64, len(keys))
	var n int64
	for i, k := range keys {
		ordered[i] = sp.Counts[k]
		n += ordered[i]
	}
	extra := int64(len(recs)) - n
	m, err := plan.Method(s)
	if err != nil {
		sp.Deviation = math.Inf(1)
		return sp
	}
	// The ideal shares are those of every pod of the workload: pods in no
	// group are counted as missing from the groups.
	for i, share := range m.Shares(int64(len(recs)), apportion.All) {
		ideal := float64(share.Lower)
		if share.Denom > 0 {
			ideal += float64(share.Frac) / float64(share.Denom)
		}
		sp.Ideal = append(sp.Ideal, ideal)
		sp.Deviation = max(sp.Deviation, math.Abs(float64(ordered[i])-ideal))
	}
	sp.Deviation += float64(extra)
	sp.Within = extra == 0 && m.WithinQuota(ordered, apportion.All)
	return sp
}

// worst is the split furthest from its ideal shares.
func worst(splits []split) (split, bool) {
	if len(splits) == 0 {
		return split{}, false
	}
	return slices.MaxFunc(splits, func(a, b split) int {
		switch {
		case a.Deviation < b.Deviation:
			return -1
		case a.Deviation > b.Deviation:
			return 1
		default:
			return strings.Compare(b.Workload, a.Workload) // the first name wins a tie
		}
	}), true
}

// describe is the split on one line: each group's count and ideal share.
func (s split) describe() string {
	keys := make([]string, 0, len(s.Counts))
	parsed, _ := strategy.Parse(s.Strategy)
	var order []string
	if parsed != nil {
		order = parsed.Keys()
	}
	parts := make([]string, 0, len(s.Counts))
	for i, k := range order {
		ideal := "?"
		if i < len(s.Ideal) {
			ideal = fmt.Sprintf("%.2f", s.Ideal[i])
		}
		parts = append(parts, fmt.Sprintf("%s: %d (ideal %s)", k, s.Counts[k], ideal))
	}
	for k := range s.Counts {
		if !slices.Contains(order, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, s.Counts[k]))
	}
	return strings.Join(parts, "; ")
}
