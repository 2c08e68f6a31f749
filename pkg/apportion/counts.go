package apportion

// CountsAt returns the split the engine reaches at n pods over the available
// groups, growing one pod at a time from none (what n steps of Next give,
// like Counts), without stepping n times.
//
// Past the bases, the method is periodic. Let P be the available weights'
// total divided by their greatest common divisor (the number of available
// groups when every available weight is 0). After the bases and every P pods
// more, each share is a whole number, so the split is forced: the bases plus
// k*w/gcd per group after k periods. From such a split every quota and every
// priority comparison of Next is the one at the bases, shifted by k periods,
// so the pods of a period go where the first period's went. Only the
// (n - bases) mod P pods of the last, partial period are stepped, by
// catchUp: O(groups + min(n, P) * log(groups)). New bounds P by
// MaxWeightSum, so that is at most MaxWeightSum cheap steps for any
// strategy, and a few for the weights people write (P of 4 for the AWS
// sample's 1:3).
//
// With caps, the pods beyond caps are in no count, and the method is
// periodic only between the points where a group reaches its cap: see
// cappedCountsAt.
func (m *Method) CountsAt(n int64, avail Set) []int64 {
	if m.capped {
		return m.cappedCountsAt(max(n, 0), avail)
	}
	counts := make([]int64, len(m.groups))
	left := max(n, 0)
	var total, members, gcd int64
	for i, g := range m.groups {
		if !avail.Has(i) {
			continue
		}
		members++
		// Bases fill first, in strategy order.
		counts[i] = min(g.Base, left)
		left -= counts[i]
		total += g.Weight
		gcd = gcdOf(gcd, g.Weight)
	}
	if left == 0 || members == 0 {
		return counts
	}
	period := members // every available weight 0: the pods are shared equally
	if total > 0 {
		period = total / gcd
	}
	periods, rest := left/period, left%period
	for i, g := range m.groups {
		switch {
		case !avail.Has(i):
		case total == 0:
			counts[i] += periods
		default:
			counts[i] += periods * (g.Weight / gcd)
		}
	}
	m.catchUp(counts, avail, rest, total == 0, gcd)
	return counts
}

// cappedCountsAt is CountsAt with caps. Between two points where groups
// reach their cap the set of full groups is fixed, and the split is forced
// (every share whole) every P pods, P being the period of the weights of
// the groups below their cap. The split is stepped from the last forced
// point at or before n, found phase by phase going back: in n's phase, P
// back at most; if that point is before the phase began (found by binary
// search, the full set only growing with n), the same from the pod before
// it. Stepping is at most one period per phase it crosses: a few steps for
// the strategies people write, O(groups * MaxWeightSum) steps at worst.
func (m *Method) cappedCountsAt(n int64, avail Set) []int64 {
	from := m.lastForced(n, avail)
	counts := make([]int64, len(m.groups))
	sp := m.splitAt(from, avail)
	left := from
	for i, g := range m.groups {
		if avail.Has(i) {
			base := min(g.Base, left)
			left -= base
			counts[i] = sp.quotaOf(i, base, g).lower
		}
	}
	for range n - from {
		g := m.Next(counts, avail)
		if g < 0 {
			break // beyond caps, or no group: forced, so not reached
		}
		counts[g]++
	}
	return counts
}

// lastForced is the last pod count at or before n at which the split over
// avail is forced: every share is whole.
func (m *Method) lastForced(n int64, avail Set) int64 {
	for {
		sp := m.splitAt(n, avail)
		if sp.rest == 0 || sp.beyond() > 0 {
			return n // within the bases, or at a whole level, or beyond caps
		}
		var gcd int64
		for i, g := range m.groups {
			if avail.Has(i) && !sp.full.Has(i) {
				gcd = gcdOf(gcd, sp.weight(g))
			}
		}
		back := n - sp.rest%(sp.total/gcd)
		if m.splitAt(back, avail).full == sp.full {
			return back
		}
		// The phase began after back: find its first pod count and go on
		// from the one before it.
		lo, hi := back, n // full(lo) differs, full(hi) is the phase's
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if m.splitAt(mid, avail).full == sp.full {
				hi = mid
			} else {
				lo = mid
			}
		}
		n = hi - 1
	}
}

// catchUp adds rest pods to counts as rest steps of Next would, from a split
// where every available share is whole (after the bases and whole periods).
// Over the pods of the period, each group's k-th pod has a release, k-1
// periods' worth of its weight (k-1)*P/w: before it, one more pod would
// exceed the group's upper quota; and a deadline k*P/w: from it on, the
// group is below its lower quota without it. A group is eligible exactly
// when its next pod is released, and Next's priority, the largest
// w/(e+1), is the earliest deadline (a group below its lower quota has the
// earliest of all). So the groups wait in one heap by release and, once
// released, in another by deadline: each step pops one group and each pod
// moves it through both heaps once, instead of weighing every group at
// every step.
func (m *Method) catchUp(counts []int64, avail Set, rest int64, equal bool, gcd int64) {
	if rest == 0 {
		return
	}
	// A released group waits in ready by its next pod's deadline, the
	// others in waiting by its release; num is the pods it has had this
	// period, plus one in ready.
	var ready, waiting timeHeap
	var p int64
	for i, g := range m.groups {
		var w int64 // the weight in lowest terms (1 each when shared equally)
		switch {
		case !avail.Has(i):
		case equal:
			w = 1
		default:
			w = g.Weight / gcd
		}
		if w > 0 {
			p += w
			// Every first pod is released from the start; its deadline
			// is P/w.
			ready.push(groupTime{num: 1, w: w, i: i})
		}
	}
	for step := int64(1); step <= rest; step++ {
		// Released at this step: num*P < step*w. Some group always is:
		// the pods given so far, step-1 in all, cannot all be at or past their
		// upper quotas, which add up to step or more.
		for len(waiting) > 0 && waiting[0].num*p < step*waiting[0].w {
			t := waiting.pop()
			t.num++ // the deadline of the same pod
			ready.push(t)
		}
		t := ready.pop()
		counts[t.i]++
		waiting.push(t) // num pods now: num*P/w is its next pod's release
	}
}

// groupTime is a time in the period, num*P/w, for group i (of weight w in
// lowest terms): earlier first, then the earlier group, as Next breaks ties.
type groupTime struct {
	num, w int64
	i      int
}

func (a groupTime) before(b groupTime) bool {
	x, y := a.num*b.w, b.num*a.w
	return x < y || x == y && a.i < b.i
}

// timeHeap is a binary min-heap of groupTimes.
type timeHeap []groupTime

func (h *timeHeap) push(t groupTime) {
	*h = append(*h, t)
	s := *h
	for c := len(s) - 1; c > 0; {
		up := (c - 1) / 2
		if !s[c].before(s[up]) {
			break
		}
		s[c], s[up] = s[up], s[c]
		c = up
	}
}

func (h *timeHeap) pop() groupTime {
	s := *h
	top, last := s[0], len(s)-1
	s[0] = s[last]
	s = s[:last]
	*h = s
	for c := 0; ; {
		l, r, least := 2*c+1, 2*c+2, c
		if l < last && s[l].before(s[least]) {
			least = l
		}
		if r < last && s[r].before(s[least]) {
			least = r
		}
		if least == c {
			return top
		}
		s[c], s[least] = s[least], s[c]
		c = least
	}
}

func gcdOf(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
