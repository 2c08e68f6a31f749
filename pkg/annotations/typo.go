package annotations

import (
	"fmt"
	"strings"
)

// settable are the apportion.dev/* keys a user writes on a workload or its
// pod template: an unknown key is matched against them for a hint.
var settable = []string{Strategy, Mode, Skip, Architectures, CapacityTimeout, Rebalance}

// Suggest returns the annotation key a user most likely meant by the unknown
// key k (a few edits away from a key apportion reads on workloads, case
// aside), or "".
func Suggest(k string) string {
	name := strings.ToLower(strings.TrimPrefix(k, Prefix))
	best, bestDist := "", 3
	for _, s := range settable {
		want := strings.TrimPrefix(s, Prefix)
		// One edit per four letters, at most two: "stratgy", "moed",
		// "capacity-timout".
		limit := min(2, max(1, len(want)/4))
		if d := TypoDistance(name, want); d <= limit && d < bestDist {
			best, bestDist = s, d
		}
	}
	return best
}

func unknownKey(k string) string {
	if s := Suggest(k); s != "" {
		return fmt.Sprintf("is not an apportion annotation: did you mean %s? As written it has no effect", s)
	}
	return "is not an apportion annotation; it has no effect"
}

// TypoDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of two adjacent bytes, each one edit.
// The keys compared are at most a few bytes long.
func TypoDistance(a, b string) int {
	// Three rows of the dynamic programme: i-2, i-1 and i.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
