package apportion

import "math/bits"

// The ideal shares: where the bases, the weights and the caps put each
// group at n pods (split, quota, Share), what Shares, Beyond, Next, Victim
// and CountsAt weigh the counts against.

// split describes the ideal share at some total n over an available set: the
// pods left after the bases and the caps (rest) and the weight total of the
// groups below their cap they are divided by (total). equal is true when
// every available weight is 0 and the rest is shared equally. full is the
// set of groups at their cap; when it holds every group with a weight, total
// is 0 and rest is the pods beyond caps. Four fields at most: the compiler
// keeps such a struct in registers, which Next and Victim need to stay fast.
type split struct {
	rest, total int64
	equal       bool
	full        Set
}

// beyond is the number of pods past every cap.
func (s split) beyond() int64 {
	if s.total == 0 && s.full != 0 {
		return s.rest
	}
	return 0
}

func (m *Method) splitAt(n int64, avail Set) split {
	sp := m.plainSplit(n, avail)
	m.capSplit(&sp, avail)
	return sp
}

// plainSplit is the split at n before the caps. It and capSplit are apart
// so that both inline into Next and Victim, which a strategy without caps
// then runs as fast as before caps existed.
func (m *Method) plainSplit(n int64, avail Set) split {
	left := n
	var total, members int64
	for i, g := range m.groups {
		if !avail.Has(i) {
			continue
		}
		members++
		total += g.Weight
		left -= min(g.Base, left)
	}
	sp := split{rest: left, total: total}
	if total == 0 {
		sp.total, sp.equal = members, true
	}
	return sp
}

// capSplit sets aside the groups at their cap, once the bases are full.
func (m *Method) capSplit(sp *split, avail Set) {
	if m.capped && sp.rest > 0 {
		sp.fill(m.groups, avail)
	}
}

// fill sets aside the groups whose share would pass their cap, once the
// bases are full: each holds its cap, and the rest is shared by the others.
// Setting a group aside only raises the others' level, so a group found full
// stays full and a few passes settle it: O(groups * capped groups) at worst,
// without allocating.
func (s *split) fill(groups []Group, avail Set) {
	for changed := true; changed && s.total > 0; {
		changed = false
		for i, g := range groups {
			if !avail.Has(i) || s.full.Has(i) || g.Max == 0 {
				continue
			}
			// Full when base + rest*w/total >= max.
			if w := s.weight(g); w > 0 && !mulLess(s.rest, w, g.Max-g.Base, s.total) {
				s.full |= 1 << uint(i)
				s.rest -= g.Max - g.Base
				s.total -= w
				changed = true
			}
		}
	}
}

// mulLess reports whether a*b < c*d, for non-negative operands, without
// overflow.
func mulLess(a, b, c, d int64) bool {
	hi1, lo1 := bits.Mul64(uint64(a), uint64(b))
	hi2, lo2 := bits.Mul64(uint64(c), uint64(d))
	return hi1 < hi2 || hi1 == hi2 && lo1 < lo2
}

func (s split) weight(g Group) int64 {
	if s.equal {
		return 1
	}
	return g.Weight
}

// quota is group i's bounds at some n: lower = floor(share), and the share's
// fractional part as frac/total (frac > 0 means upper = lower + 1).
type quota struct {
	lower, frac int64
}

func (q quota) upper() int64 {
	if q.frac > 0 {
		return q.lower + 1
	}
	return q.lower
}

// Share is a group's ideal share at some n, exactly: Lower + Frac/Denom.
type Share struct {
	Lower int64
	Frac  int64
	Denom int64
}

// Upper is ceil of the share.
func (s Share) Upper() int64 {
	if s.Frac > 0 {
		return s.Lower + 1
	}
	return s.Lower
}

// Float is the share as a float64, for display.
func (s Share) Float() float64 {
	if s.Frac == 0 {
		return float64(s.Lower)
	}
	return float64(s.Lower) + float64(s.Frac)/float64(s.Denom)
}

// quotaOf is group i's quota, base being its part of the bases.
func (s split) quotaOf(i int, base int64, g Group) quota {
	switch {
	case s.full != 0 && s.full.Has(i):
		return quota{lower: g.Max}
	case s.total == 0:
		// Beyond caps: a group of weight 0 keeps its base.
		return quota{lower: base}
	}
	return s.quota(base, g)
}

func (s split) quota(base int64, g Group) quota {
	w := s.weight(g)
	p := s.rest * w
	return quota{lower: base + p/s.total, frac: p % s.total}
}
