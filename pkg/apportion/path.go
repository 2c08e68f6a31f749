package apportion

import (
	"math"
	"sync"
)

// MaxPeriod bounds the period Position tabulates: the available weights'
// total over their greatest common divisor (4 for the AWS sample's 1:3, 100
// for 33:67). A strategy with a longer period has no position past its
// bases.
const MaxPeriod = 1024

// maxPrefix bounds, with caps, the pods past the bases Position tabulates
// before the path settles into its last period (once every group that will
// reach its cap has).
const maxPrefix = 4 * MaxPeriod

// path tabulates the engine's path with every group available, built the
// first time Position needs it: where each group's pods come in the first
// period past the bases. Every later period repeats it (see CountsAt). With
// caps, the path repeats only once the groups that reach their cap have
// (start): before it, each group's pods past its base are listed (prefix).
type path struct {
	once        sync.Once
	ok          bool
	baseStart   []int64    // position of each group's first base pod
	bases       int64      // pods in all the bases
	start       int64      // where the repeating periods start
	startCounts []int64    // each group's pods before start
	prefix      [][]uint16 // with caps, the positions past the bases of each group's pods past its base before start
	period      int64      // 0 when, with caps, the path ends at start
	perPeriod   []int64    // each group's pods in one period
	offsets     [][]uint16 // each group's pods' places within a period
}

// Position is where the engine's path, with every group available, places
// group g's c-th pod (c from 1): the number of pods Sequence gives before it.
// A pod of a workload grown by the engine from none sits at its position, so
// removing the pods highest position first walks the path back; and a pod
// added at the top of its group never moves another's position. ok is false
// when the path never gives group g a c-th pod (its weight is 0 and c is past
// its base), when the position would pass math.MaxInt32, or when the period
// is longer than MaxPeriod and c is past the group's base. It is O(1) once
// the period is tabulated (O(groups * period) steps, once per Method).
func (m *Method) Position(g int, c int64) (pos int64, ok bool) {
	if g < 0 || g >= len(m.groups) || c < 1 {
		return 0, false
	}
	p := m.tabulate()
	if base := m.groups[g].Base; c <= base {
		pos = p.baseStart[g] + c - 1
		return pos, pos <= math.MaxInt32
	}
	if !p.ok {
		return 0, false
	}
	if c <= p.startCounts[g] {
		pos = p.bases + int64(p.prefix[g][c-m.groups[g].Base-1])
		return pos, pos <= math.MaxInt32
	}
	if p.perPeriod[g] == 0 {
		return 0, false
	}
	e := c - p.startCounts[g] - 1 // the pod's place among the group's pods from start, from 0
	q, r := e/p.perPeriod[g], e%p.perPeriod[g]
	if q > (math.MaxInt32-p.start)/p.period {
		return 0, false
	}
	pos = p.start + q*p.period + int64(p.offsets[g][r])
	return pos, pos <= math.MaxInt32
}

func (m *Method) tabulate() *path {
	p := m.path
	p.once.Do(func() {
		p.baseStart = make([]int64, len(m.groups))
		counts := make([]int64, len(m.groups))
		var total, gcd int64
		for i, g := range m.groups {
			p.baseStart[i] = p.bases // at most 64 bases of at most 2^31: no overflow
			p.bases += g.Base
			counts[i] = g.Base
			total += g.Weight
			gcd = gcdOf(gcd, g.Weight)
		}
		p.start, p.startCounts = p.bases, counts
		p.prefix = make([][]uint16, len(m.groups))
		if m.capped {
			p.ok = m.tabulateCapped(p)
			return
		}
		p.perPeriod = make([]int64, len(m.groups))
		if total == 0 {
			p.period = int64(len(m.groups)) // shared equally past the bases
			for i := range p.perPeriod {
				p.perPeriod[i] = 1
			}
		} else {
			p.period = total / gcd
			for i, g := range m.groups {
				p.perPeriod[i] = g.Weight / gcd
			}
		}
		if p.period > MaxPeriod || p.bases > math.MaxInt32 {
			return
		}
		p.offsets = make([][]uint16, len(m.groups))
		for i := range p.offsets {
			p.offsets[i] = make([]uint16, 0, p.perPeriod[i])
		}
		counts = append([]int64(nil), counts...)
		for step := range p.period {
			g := m.Next(counts, All)
			counts[g]++
			p.offsets[g] = append(p.offsets[g], uint16(step))
		}
		p.ok = true
	})
	return p
}

// tabulateCapped fills p past the bases for a Method with caps: it finds
// where the path settles, once the full set is the last one it will be and
// the split is forced, and steps to there and one period on. false when
// that is more than maxPrefix pods past the bases, or the period is longer
// than MaxPeriod.
func (m *Method) tabulateCapped(p *path) bool {
	if p.bases > math.MaxInt32 {
		return false
	}
	// The last full set, reached at the latest when every capped group's
	// share has passed its cap: at most maxValue + 1 levels of weight.
	last := m.splitAt(math.MaxInt64/4, All).full
	lo, hi := p.bases-1, int64(math.MaxInt64/4) // full(lo) is not last, full(hi) is
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if m.splitAt(mid, All).full == last {
			hi = mid
		} else {
			lo = mid
		}
	}
	sp := m.splitAt(hi, All)
	var gcd int64
	p.perPeriod = make([]int64, len(m.groups))
	for i, g := range m.groups {
		if !last.Has(i) {
			gcd = gcdOf(gcd, sp.weight(g))
		}
	}
	start := hi
	if sp.total > 0 && gcd > 0 {
		p.period = sp.total / gcd
		if r := sp.rest % p.period; r > 0 {
			start += p.period - r
		}
		for i, g := range m.groups {
			if !last.Has(i) {
				p.perPeriod[i] = sp.weight(g) / gcd
			}
		}
	}
	if p.period > MaxPeriod || start-p.bases+p.period > maxPrefix {
		return false
	}
	counts := append([]int64(nil), p.startCounts...)
	p.offsets = make([][]uint16, len(m.groups))
	for n := p.bases; n < start+p.period; n++ {
		g := m.Next(counts, All)
		if g < 0 {
			return false // beyond caps before settling: not reached
		}
		counts[g]++
		if n < start {
			p.prefix[g] = append(p.prefix[g], uint16(n-p.bases))
		} else {
			p.offsets[g] = append(p.offsets[g], uint16(n-start))
		}
		if n+1 == start {
			p.startCounts = append([]int64(nil), counts...)
		}
	}
	p.start = start
	return true
}
