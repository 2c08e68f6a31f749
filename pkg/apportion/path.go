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

// path tabulates the engine's path with every group available, built the
// first time Position needs it: where each group's pods come in the first
// period past the bases. Every later period repeats it (see CountsAt).
type path struct {
	once      sync.Once
	ok        bool
	baseStart []int64 // position of each group's first base pod
	bases     int64   // pods in all the bases
	period    int64
	perPeriod []int64    // each group's pods in one period
	offsets   [][]uint16 // each group's pods' places within a period
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
	if !p.ok || p.perPeriod[g] == 0 {
		return 0, false
	}
	e := c - m.groups[g].Base - 1 // the pod's place among the group's pods past its base, from 0
	q, r := e/p.perPeriod[g], e%p.perPeriod[g]
	if q > (math.MaxInt32-p.bases)/p.period {
		return 0, false
	}
	pos = p.bases + q*p.period + int64(p.offsets[g][r])
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
		for step := range p.period {
			g := m.Next(counts, All)
			counts[g]++
			p.offsets[g] = append(p.offsets[g], uint16(step))
		}
		p.ok = true
	})
	return p
}
