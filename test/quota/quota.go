// Package quota is the rule a Job's live pods are held to, shared by the
// batch e2e suite and `make bench-scale --batch` so that both count the same
// samples off.
//
// A Job runs up to parallelism pods at a time. With that many live, they are
// within the strategy's quota at their count. With fewer (pods finished whose
// replacements are not decided yet), a group below its share is what the next
// pods correct, so only a group above its ceiling at parallelism is off: no
// replacement can take pods away from it.
package quota

import (
	"fmt"
	"slices"
	"strings"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Off is how a sample of live pods is off quota.
type Off struct {
	// Pods is how many pods are in the wrong place: above a group's
	// ceiling or in no group of the strategy (or, when none is, missing
	// from the groups below their floor). 0 exactly when within quota.
	Pods int64
	// Why names each group off, in the strategy's order; empty when
	// within quota.
	Why []string
}

// Within reports whether the sample is within quota.
func (o Off) Within() bool { return o.Pods == 0 }

// String is the groups off, or "" when within quota.
func (o Off) String() string { return strings.Join(o.Why, "; ") }

// Live checks the live pods of an owner that runs up to parallelism pods at
// a time. counts are the pods by group key; a key that names no group of s
// (a pod in no group, say) is always off.
func Live(s *compiled.Strategy, counts map[string]int64, parallelism int64) Off {
	var n int64
	for _, c := range counts {
		n += c
	}
	if n >= parallelism {
		return At(s, counts)
	}
	var off Off
	for i, sh := range s.Method.Shares(parallelism, apportion.All) {
		key := s.Strategy.Groups[i].Key()
		if got := counts[key]; got > sh.Upper() {
			off.Pods += got - sh.Upper()
			off.Why = append(off.Why, fmt.Sprintf("%s: %d, more than %d of %d", key, got, sh.Upper(), parallelism))
		}
	}
	return strays(s, counts, off, 0)
}

// At checks counts against the quota at their own total: every group
// between the floor and the ceiling of its ideal share, no pod outside the
// groups.
func At(s *compiled.Strategy, counts map[string]int64) Off {
	var n int64
	for _, c := range counts {
		n += c
	}
	var off Off
	var under int64
	for i, sh := range s.Method.Shares(n, apportion.All) {
		key := s.Strategy.Groups[i].Key()
		got := counts[key]
		if got < sh.Lower || got > sh.Upper() {
			off.Pods += max(0, got-sh.Upper())
			under += max(0, sh.Lower-got)
			off.Why = append(off.Why, fmt.Sprintf("%s: %d, quota %d..%d of %d", key, got, sh.Lower, sh.Upper(), n))
		}
	}
	return strays(s, counts, off, under)
}

// strays adds to off the pods of counts in no group of s; off.Pods is then
// at least under, the pods missing below the floors.
func strays(s *compiled.Strategy, counts map[string]int64, off Off, under int64) Off {
	var keys []string
	for k, c := range counts {
		if _, ok := s.Index[k]; !ok && c > 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		off.Pods += counts[k]
		off.Why = append(off.Why, fmt.Sprintf("%s: %d", k, counts[k]))
	}
	off.Pods = max(off.Pods, under)
	return off
}

// NoGroup is the key GroupOf gives a node that carries the labels of no
// group: pods counted under it are always off quota (At).
const NoGroup = "(no group)"

// GroupOf names the group of s whose labels a node carries (NoGroup when
// none does); when several match, the pod's decision settles it, else the
// first written wins.
func GroupOf(s *strategy.Strategy, nodeLabels map[string]string, decided string) string {
	var matches []string
	for _, g := range s.Groups {
		if carries(nodeLabels, g.Selector()) {
			matches = append(matches, g.Key())
		}
	}
	switch {
	case len(matches) == 0:
		return NoGroup
	case slices.Contains(matches, decided):
		return decided
	default:
		return matches[0]
	}
}

func carries(nodeLabels, want map[string]string) bool {
	for k, v := range want {
		if l, ok := nodeLabels[k]; !ok || l != v {
			return false
		}
	}
	return true
}
