// Package apportion decides how many pods of a workload go to each group of a
// strategy, one pod at a time, so that the split is exact for every replica
// count. It is pure: no client, no I/O, no allocation on the decision path.
//
// # Ideal share
//
// For n pods over groups with bases b and weights w, bases are filled first in
// strategy order (group i gets min(b_i, what is left)), and the R pods left
// after all bases are shared in proportion to the weights:
//
//	share_i(n) = basepart_i(n) + R(n) * w_i / W
//
// # Quota property
//
// A split c is "within quota" at n when floor(share_i(n)) <= c_i <=
// ceil(share_i(n)) for every group. For n <= sum(b) every share is an integer,
// so the split is forced: pods fill base after base in strategy order. Past
// the bases, the pods above the bases form a plain proportional apportionment
// of R seats among populations w, and the engine uses Balinski & Young's
// quota method for it (M. L. Balinski, H. P. Young, "The Quota Method of
// Apportionment", Amer. Math. Monthly 82 (1975)): the next pod goes, among the
// groups that would not exceed their upper quota at n+1, to the one with the
// largest Jefferson (D'Hondt) priority w_i / (e_i + 1), e_i being the group's
// pods above its base. The method is house-monotone (adding a pod never takes
// one away from a group) and stays within quota for every n, which a
// largest-remainder or largest-deficit rule does not.
//
// Worked example, the AWS sample webhook's strategy (on-demand base 2
// weight 1, spot weight 3):
//
//	pod:        1   2   3     4     5     6     7     8     9     10
//	group:      od  od  spot  spot  od    spot  spot  spot  od    spot
//	od share:   1   2   2.25  2.5   2.75  3     3.25  3.5   3.75  4
//	od count:   1   2   2     2     3     3     3     3     4     4
//	spot share: 0   0   0.75  1.5   2.25  3     3.75  4.5   5.25  6
//	spot count: 0   0   1     2     2     3     4     5     5     6
//
// Pod 5: both groups are eligible and have the same priority (od 1/(0+1),
// spot 3/(2+1)), so the tie rule below gives it to on-demand.
//
// # Why it holds, and scaling down
//
// Seen as scheduling, the k-th pod above a group's base has a deadline (the
// first n at which its lower quota needs it, n = ceil(k*W/w)) and a release
// (the first n at which its upper quota allows it). The quota method is
// earliest-deadline-first over released pods, which is optimal: from any
// split that lies on some path of splits within quota, it never leaves quota.
// Removing pods is the same problem with time reversed: Victim removes, among
// the groups that stay within lower quota, the one whose count would soonest
// exceed its upper quota going down (largest (e-1)/w). Each direction keeps
// the split on a complete quota path, so any mix of scale-ups and
// scale-downs from an empty workload stays within quota at every step.
//
// # Ties
//
// When two groups have the same priority, the one written first in the
// strategy wins (and, when removing, the one written last loses first). The
// order of the strategy is already its priority for bases, so the same order
// settles ties; the EKS blog webhook's example (base 1 then two equal weights, 10 pods)
// therefore gives 1/5/4.
//
// # Live decisions
//
// Next and Victim accept any counts, including splits that are off quota
// today (pods placed before the strategy existed, or under an older one). A
// step never adds a pod to a group already at or above its upper quota, nor
// removes one from a group at or below its lower quota, when another choice
// exists; groups outside their quota are repaired first, the largest
// shortfall (or excess) first. On splits the quota method itself produced,
// Next is exactly the quota method.
//
// # Unavailable groups
//
// A group that cannot be served (no NodePool, no capacity) is left out: the
// decision is made as if the strategy had only the available groups, over the
// pods those groups hold, with their weights renormalised. The base of an
// unavailable group is not moved to another group: it simply stops counting
// until the group is back, and the pods of the other groups follow their own
// bases and weights. If every available group has weight 0, the available
// groups share the pods past their bases equally.
//
// # Caps
//
// A group with a cap (Max) never holds more than Max pods. Its ideal share
// is capped the way water fills vessels: at n, the groups whose share would
// pass their cap hold their cap, and the pods left are shared by the other
// groups in proportion to their weights, as if the capped groups were not
// there. A group of weight 0 still takes only its base. Past the point where
// every group with a weight is at its cap, the extra pods are beyond caps:
// no group takes them, Next returns BeyondCaps, and they are left out of
// every count.
//
// The quota property holds among the groups below their cap, and the proof
// above still applies. The pods past the bases now fill at a common level
// L(n) (a group's share is its base plus L*w, or its cap), and L grows with
// n, faster each time a group reaches its cap. A group's k-th pod above its
// base is released when L passes (k-1)/w and due when L reaches k/w: the
// order of deadlines is still the order of w/(e+1), so Next, unchanged but
// for the capped shares, is still earliest-deadline-first.
//
// The Method (apportion.go) gives Shares, Beyond, Next, Victim, Sequence
// and Counts; the ideal shares they weigh the counts against are computed
// in shares.go; CountsAt (counts.go) reaches the split at n pods without n
// steps, and Position (path.go) where on the path a group's c-th pod comes.
package apportion

import (
	"errors"
	"fmt"
	"math"
)

// MaxGroups is the largest number of groups a Method accepts (Set is a 64-bit
// mask).
const MaxGroups = 64

// Set is a set of group indexes, bit i for group i.
type Set uint64

// All is the set of every group.
const All Set = math.MaxUint64

// Has reports whether group i is in the set.
func (s Set) Has(i int) bool { return s&(1<<uint(i)) != 0 }

// Without returns the set minus group i.
func (s Set) Without(i int) Set { return s &^ (1 << uint(i)) }

// Group is the part of a strategy group the engine needs.
type Group struct {
	Base   int64
	Weight int64
	// Max is the most pods the group holds; 0 is no cap. At least Base.
	Max int64
}

// BeyondCaps is what Next returns when every available group that takes
// pods past its base is at its cap: the pod is beyond caps.
const BeyondCaps = -2

// Method apportions pods among a fixed list of groups. It is immutable and
// safe for concurrent use.
type Method struct {
	groups []Group
	capped bool  // some group has a cap
	path   *path // Position's table, built on first use
}

// maxValue keeps every product in int64: shares are computed as R*w with R and
// w below 2^31, and Jefferson priorities as w*(e+1) with e below 2^31.
const maxValue = math.MaxInt32

// MaxWeightSum is the largest sum of the weights in lowest terms (divided by
// their greatest common divisor) a Method accepts. Past the bases the
// sequence repeats every that many pods, and CountsAt steps through at most
// one repetition: the bound is what keeps CountsAt and Counts small at any n.
//
// Why a bound and not a formula: the split the method reaches at n depends
// on the way there. Whether a group holds its ceiling at n depends on when,
// since its share last crossed a whole number, it was the most urgent group
// with room for a pod, and that turns on the pods at which several groups'
// shares are near whole numbers at once (a simultaneous Diophantine
// approximation, with no known fast algorithm for many groups). Choosing the
// ceilings at n by a rule of n alone (largest remainder, or the Jefferson
// order from the floors) loses house monotonicity: a pod added would take a
// place away from another group.
const MaxWeightSum = 10_000

// New validates groups and returns a Method for them.
func New(groups []Group) (*Method, error) {
	if len(groups) == 0 {
		return nil, errors.New("no groups")
	}
	if len(groups) > MaxGroups {
		return nil, fmt.Errorf("%d groups, at most %d are allowed", len(groups), MaxGroups)
	}
	var sum, gcd int64
	capped := false
	for i, g := range groups {
		if g.Base < 0 || g.Weight < 0 || g.Max < 0 || g.Base > maxValue || g.Weight > maxValue || g.Max > maxValue {
			return nil, fmt.Errorf("group %d: base, weight and max must be in [0, %d]", i+1, maxValue)
		}
		if g.Max > 0 && g.Base > g.Max {
			return nil, fmt.Errorf("group %d: base %d is more than max %d", i+1, g.Base, g.Max)
		}
		capped = capped || g.Max > 0
		sum += g.Weight
		gcd = gcdOf(gcd, g.Weight)
	}
	if gcd > 0 && sum/gcd > MaxWeightSum {
		return nil, fmt.Errorf("the weights add up to %d in lowest terms, at most %d is allowed", sum/gcd, MaxWeightSum)
	}
	return &Method{groups: append([]Group(nil), groups...), capped: capped, path: &path{}}, nil
}

// Len is the number of groups.
func (m *Method) Len() int { return len(m.groups) }

// Groups returns a copy of the groups.
func (m *Method) Groups() []Group { return append([]Group(nil), m.groups...) }

// Shares returns every group's ideal share at n pods over the available
// groups; unavailable groups get a zero share. A group at its cap has its
// cap; the pods beyond caps (Beyond) are in no share.
func (m *Method) Shares(n int64, avail Set) []Share {
	out := make([]Share, len(m.groups))
	sp := m.splitAt(n, avail)
	left := n
	for i, g := range m.groups {
		if !avail.Has(i) {
			continue
		}
		base := min(g.Base, left)
		left -= base
		q := sp.quotaOf(i, base, g)
		out[i] = Share{Lower: q.lower, Frac: q.frac, Denom: max(sp.total, 1)}
	}
	return out
}

// Beyond is the number of pods beyond caps at n pods over the available
// groups: those no group takes because every group with a weight is at its
// cap. 0 without caps.
func (m *Method) Beyond(n int64, avail Set) int64 {
	return m.splitAt(n, avail).beyond()
}

// WithinQuota reports whether counts are within quota over the available
// groups (counts of unavailable groups are ignored).
func (m *Method) WithinQuota(counts []int64, avail Set) bool {
	return m.OffQuota(counts, avail) == 0
}

// OffQuota is how far counts are from quota over the available groups: the
// pods below each group's lower quota plus those above its upper quota (0
// exactly when WithinQuota).
func (m *Method) OffQuota(counts []int64, avail Set) int64 {
	n := m.total(counts, avail)
	sp := m.splitAt(n, avail)
	left := n
	var off int64
	for i, g := range m.groups {
		if !avail.Has(i) {
			continue
		}
		base := min(g.Base, left)
		left -= base
		q := sp.quotaOf(i, base, g)
		off += max(0, q.lower-counts[i]) + max(0, counts[i]-q.upper())
	}
	return off
}

// Next returns the group that should receive one more pod, given the pods
// each group holds now (counts, indexed like the groups), choosing among the
// available groups only. It returns -1 when no group is available, and
// BeyondCaps when the pod is beyond caps. It never picks a group at its cap.
// It is O(groups) without caps (O(groups * capped groups) at worst with
// them) and does not allocate.
func (m *Method) Next(counts []int64, avail Set) int {
	n := m.total(counts, avail) + 1
	sp := m.plainSplit(n, avail)
	m.capSplit(&sp, avail)
	left := n
	best, bestBelow := -1, false
	var bestShort, bestFrac, bestW, bestE int64
	for i, g := range m.groups {
		if !avail.Has(i) {
			continue
		}
		base := min(g.Base, left)
		left -= base
		q := sp.quotaOf(i, base, g)
		c := counts[i]
		switch {
		case c < q.lower:
			// Below lower quota at n: repair first, largest shortfall first.
			short := q.lower - c
			if !bestBelow || short > bestShort || (short == bestShort && q.frac > bestFrac) {
				best, bestBelow, bestShort, bestFrac = i, true, short, q.frac
			}
		case !bestBelow && c == q.lower && q.frac > 0:
			// Eligible for the quota method: one more stays within upper
			// quota. Highest w/(e+1) wins; ties keep the earlier group.
			w, e := sp.weight(g), c-g.Base
			if best < 0 || w*(bestE+1) > bestW*(e+1) {
				best, bestW, bestE = i, w, e
			}
		}
	}
	if best < 0 && sp.beyond() > 0 {
		return BeyondCaps
	}
	return best
}

// Victim returns the group one pod should be removed from, given the pods
// each group holds now, choosing among the available groups only. It returns
// -1 when the available groups hold no pod. It is O(groups) and does not
// allocate.
func (m *Method) Victim(counts []int64, avail Set) int {
	n := m.total(counts, avail)
	if n == 0 {
		return -1
	}
	n--
	sp := m.plainSplit(n, avail)
	m.capSplit(&sp, avail)
	left := n
	best, bestAbove := -1, false
	var bestExcess, bestFrac, bestW, bestE int64
	for i, g := range m.groups {
		if !avail.Has(i) {
			continue
		}
		base := min(g.Base, left)
		left -= base
		q := sp.quotaOf(i, base, g)
		c := counts[i]
		switch {
		case c > q.upper():
			// Above upper quota at n-1: remove from the largest excess
			// (c - share) first; on a tie the later group loses.
			excess := c - q.lower
			if !bestAbove || excess > bestExcess || (excess == bestExcess && q.frac <= bestFrac) {
				best, bestAbove, bestExcess, bestFrac = i, true, excess, q.frac
			}
		case !bestAbove && c > q.lower:
			// c == upper: removing one stays within lower quota. Going down,
			// the group whose count would next exceed its upper quota is the
			// most urgent: that is the largest (e-1)/w, e being its pods
			// above its base. Ties: the later group loses.
			w, e := sp.weight(g), c-g.Base
			if best < 0 || (e-1)*bestW >= (bestE-1)*w {
				best, bestW, bestE = i, w, e
			}
		}
	}
	return best
}

// Sequence returns, for pods 1..n added one at a time to an empty workload
// with every group available, the index of the group each pod goes to
// (BeyondCaps for a pod beyond caps).
func (m *Method) Sequence(n int) []int {
	seq := make([]int, n)
	counts := make([]int64, len(m.groups))
	for j := range seq {
		g := m.Next(counts, All)
		seq[j] = g
		if g >= 0 {
			counts[g]++
		}
	}
	return seq
}

// Counts returns how many pods each group holds after Sequence(n), without
// stepping n times (CountsAt).
func (m *Method) Counts(n int) []int64 {
	return m.CountsAt(int64(n), All)
}

// total is the number of pods the available groups hold.
func (m *Method) total(counts []int64, avail Set) int64 {
	m.checkLen(counts)
	var n int64
	for i := range m.groups {
		if avail.Has(i) {
			n += counts[i]
		}
	}
	return n
}

func (m *Method) checkLen(counts []int64) {
	if len(counts) != len(m.groups) {
		panic(fmt.Sprintf("apportion: %d counts for %d groups", len(counts), len(m.groups)))
	}
}
