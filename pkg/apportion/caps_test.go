package apportion

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// gm is shorthand for a capped group in test tables.
func gm(base, weight, maxPods int64) Group { return Group{Base: base, Weight: weight, Max: maxPods} }

// capShares is the capped ideal split at n over avail, worked out apart from
// the engine, in rationals: bases first in order, then a common level L such
// that each group with a weight has min(cap-base, L*w) past its base and
// these add up to the pods left; past the level at which every group with a
// weight is capped, the pods left over are beyond caps. When every
// available weight is 0 each counts 1.
func capShares(gs []Group, n int64, avail Set) (shares []*big.Rat, beyond int64) {
	shares = make([]*big.Rat, len(gs))
	left := n
	var weights int64
	for i, g := range gs {
		shares[i] = new(big.Rat)
		if avail.Has(i) {
			b := min(g.Base, left)
			left -= b
			shares[i].SetInt64(b)
			weights += g.Weight
		}
	}
	weight := func(g Group) int64 {
		if weights == 0 {
			return 1
		}
		return g.Weight
	}
	if left == 0 {
		return shares, 0
	}
	// The levels at which capped groups fill, lowest first.
	type lvl struct {
		at *big.Rat
		i  int
	}
	var levels []lvl
	var open []int // groups with a weight, capped or not
	for i, g := range gs {
		if !avail.Has(i) || weight(g) == 0 {
			continue
		}
		open = append(open, i)
		if g.Max > 0 {
			levels = append(levels, lvl{big.NewRat(g.Max-g.Base, weight(g)), i})
		}
	}
	sort.Slice(levels, func(a, b int) bool { return levels[a].at.Cmp(levels[b].at) < 0 })
	// Past each level, the pods the groups hold over their bases.
	rest := big.NewRat(left, 1)
	full := map[int]bool{}
	for _, l := range levels {
		// Pods placed when the level reaches l.at.
		placed := new(big.Rat)
		for _, i := range open {
			if full[i] {
				placed.Add(placed, big.NewRat(gs[i].Max-gs[i].Base, 1))
			} else {
				placed.Add(placed, new(big.Rat).Mul(l.at, big.NewRat(weight(gs[i]), 1)))
			}
		}
		if placed.Cmp(rest) > 0 {
			break
		}
		full[l.i] = true
	}
	var capsum, w int64
	for _, i := range open {
		if full[i] {
			capsum += gs[i].Max - gs[i].Base
			shares[i].SetInt64(gs[i].Max)
		} else {
			w += weight(gs[i])
		}
	}
	if w == 0 {
		return shares, left - capsum
	}
	level := big.NewRat(left-capsum, w)
	for _, i := range open {
		if !full[i] {
			shares[i].Add(shares[i], new(big.Rat).Mul(level, big.NewRat(weight(gs[i]), 1)))
		}
	}
	return shares, 0
}

// checkCaps fails unless counts, with beyond pods beyond caps, are the
// capped split's quota at their total: every group within floor and ceil of
// its capped share, none past its cap, and the pods beyond caps exactly those
// past every cap.
func checkCaps(t *testing.T, gs []Group, counts []int64, beyond int64, avail Set, step string) {
	t.Helper()
	n := beyond
	for i, c := range counts {
		if avail.Has(i) {
			n += c
		}
	}
	shares, want := capShares(gs, n, avail)
	if beyond != want {
		t.Fatalf("%s: %d pods beyond caps at n=%d, want %d (groups %v, counts %v)", step, beyond, n, want, gs, counts)
	}
	for i, c := range counts {
		if !avail.Has(i) {
			continue
		}
		if gs[i].Max > 0 && c > gs[i].Max {
			t.Fatalf("%s: group %d holds %d pods, past its cap %d (groups %v, counts %v)", step, i, c, gs[i].Max, gs, counts)
		}
		lo := new(big.Int).Quo(shares[i].Num(), shares[i].Denom()).Int64()
		hi := lo
		if !shares[i].IsInt() {
			hi++
		}
		if c < lo || c > hi {
			t.Fatalf("%s: group %d holds %d pods, its capped share at n=%d is %s (groups %v, counts %v)",
				step, i, c, n, shares[i].FloatString(3), gs, counts)
		}
	}
}

// randomCapped draws a strategy as randomGroups does, then caps some of its
// groups (every one, at times) at or above their bases.
func randomCapped(r *rand.Rand) []Group {
	gs := randomGroups(r)
	every := r.IntN(4) == 0
	for i := range gs {
		if every || r.IntN(2) == 0 {
			gs[i].Max = max(gs[i].Base, 1) + int64(r.IntN(40))
		}
	}
	return gs
}

// TestCapsQuotaEveryN is the accuracy contract with caps: for random
// strategies with caps and every n up to 1,000, growing one pod at a time,
// no group passes its cap, the groups below their cap are within quota of
// the capped shares, and the pods Next finds beyond caps are exactly those
// past every cap; CountsAt jumps to the same split. Scaling down by Victim
// (the pods beyond caps go first) and back up keeps all of it at every step.
func TestCapsQuotaEveryN(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 26))
	strategies := 300
	if testing.Short() {
		strategies = 60
	}
	for s := range strategies {
		gs := randomCapped(r)
		m := mustNew(t, gs...)
		avail := All
		if len(gs) > 1 && r.IntN(5) == 0 {
			avail = avail.Without(r.IntN(len(gs)))
		}
		counts := make([]int64, len(gs))
		var beyond int64
		for n := int64(1); n <= 1000; n++ {
			if i := m.Next(counts, avail); i == BeyondCaps {
				beyond++
			} else {
				if i < 0 || !avail.Has(i) {
					t.Fatalf("groups %v: Next(%v, %b) = %d", gs, counts, avail, i)
				}
				counts[i]++
			}
			checkCaps(t, gs, counts, beyond, avail, fmt.Sprintf("strategy %d up to %d", s, n))
			if n%97 == 0 || n < 40 {
				if got := m.CountsAt(n, avail); !slices.Equal(got, counts) {
					t.Fatalf("groups %v avail %b: CountsAt(%d) = %v, stepping gives %v", gs, avail, n, got, counts)
				}
			}
		}
		low := r.Int64N(1000)
		for n := int64(1000); n > low; n-- {
			if beyond > 0 {
				beyond--
			} else {
				v := m.Victim(counts, avail)
				if v < 0 || counts[v] == 0 {
					t.Fatalf("groups %v: Victim(%v) = %d", gs, counts, v)
				}
				counts[v]--
			}
			checkCaps(t, gs, counts, beyond, avail, fmt.Sprintf("strategy %d down to %d", s, n-1))
		}
		for n := low + 1; n <= low+300; n++ {
			if i := m.Next(counts, avail); i == BeyondCaps {
				beyond++
			} else {
				counts[i]++
			}
			checkCaps(t, gs, counts, beyond, avail, fmt.Sprintf("strategy %d 1000->%d then up to %d", s, low, n))
		}
	}
}

// TestCapsRandomWalk: any mix of scale-ups and scale-downs from none keeps
// the capped split within quota and under every cap.
func TestCapsRandomWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 4))
	for s := range 300 {
		gs := randomCapped(r)
		m := mustNew(t, gs...)
		counts := make([]int64, len(gs))
		var beyond int64
		n := 0
		for step := range 40 {
			up := r.IntN(2) == 0 || n == 0
			for run := 1 + r.IntN(80); run > 0 && (up || n > 0); run-- {
				switch {
				case up && m.Next(counts, All) == BeyondCaps:
					beyond++
					n++
				case up:
					counts[m.Next(counts, All)]++
					n++
				case beyond > 0:
					beyond--
					n--
				default:
					counts[m.Victim(counts, All)]--
					n--
				}
				checkCaps(t, gs, counts, beyond, All, fmt.Sprintf("strategy %d walk step %d", s, step))
			}
		}
	}
}

func TestCapsExamples(t *testing.T) {
	const B = BeyondCaps
	for _, tc := range []struct {
		name   string
		groups []Group
		seq    []int
	}{{
		name:   "at most 3 on on-demand, the rest on spot",
		groups: []Group{gm(0, 1, 3), g(0, 1)},
		seq:    []int{0, 1, 0, 1, 0, 1, 1, 1, 1, 1},
	}, {
		name:   "a base as large as the cap: the base, then nothing more",
		groups: []Group{gm(3, 1, 3), g(0, 1)},
		seq:    []int{0, 0, 0, 1, 1, 1, 1},
	}, {
		name:   "the seed 004 strategy with on-demand capped at 3",
		groups: []Group{gm(2, 1, 3), g(0, 3)},
		seq:    []int{0, 0, 1, 1, 0, 1, 1, 1, 1, 1},
	}, {
		name:   "every group capped: the pods past 2+3 are beyond caps",
		groups: []Group{gm(0, 1, 2), gm(0, 1, 3)},
		seq:    []int{0, 1, 0, 1, 1, B, B},
	}, {
		name:   "a spot pool capped: the other two share what it cannot take",
		groups: []Group{gm(1, 0, 1), gm(0, 1, 2), g(0, 1), g(0, 2)},
		seq:    []int{0, 3, 1, 2, 3, 3, 1, 2, 3, 3, 2, 3, 3, 2},
	}, {
		name:   "a weight 0 group keeps only its base, capped or not",
		groups: []Group{gm(1, 0, 5), gm(0, 1, 2)},
		seq:    []int{0, 1, 1, B, B},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNew(t, tc.groups...)
			if got := m.Sequence(len(tc.seq)); !slices.Equal(got, tc.seq) {
				t.Errorf("Sequence(%d) = %v, want %v", len(tc.seq), got, tc.seq)
			}
			beyond := int64(0)
			for _, i := range tc.seq {
				if i == B {
					beyond++
				}
			}
			if got := m.Beyond(int64(len(tc.seq)), All); got != beyond {
				t.Errorf("Beyond(%d) = %d, want %d", len(tc.seq), got, beyond)
			}
		})
	}
}

func TestCapsShares(t *testing.T) {
	m := mustNew(t, gm(0, 1, 3), g(0, 1))
	for _, tc := range []struct {
		n    int64
		want []float64
	}{{5, []float64{2.5, 2.5}}, {6, []float64{3, 3}}, {10, []float64{3, 7}}} {
		sh := m.Shares(tc.n, All)
		for i, w := range tc.want {
			if sh[i].Float() != w {
				t.Errorf("n=%d: share[%d] = %v, want %v", tc.n, i, sh[i].Float(), w)
			}
		}
	}
	// With spot out, on-demand takes up to its cap and the rest is beyond.
	if sh, b := m.Shares(5, All.Without(1)), m.Beyond(5, All.Without(1)); sh[0].Float() != 3 || b != 2 {
		t.Errorf("spot out, 5 pods: on-demand share %v, %d beyond; want 3 and 2", sh[0].Float(), b)
	}
	if m.Next([]int64{3, 0}, All.Without(1)) != BeyondCaps {
		t.Error("spot out, on-demand at its cap: Next is not BeyondCaps")
	}
}

func TestCapsNewRejects(t *testing.T) {
	for _, gs := range [][]Group{{gm(3, 1, 2)}, {gm(0, 1, -1)}, {gm(0, 1, maxValue+1)}} {
		if _, err := New(gs); err == nil {
			t.Errorf("New(%v) succeeded, want an error", gs)
		}
	}
	if _, err := New([]Group{gm(2, 1, 2), g(0, 1)}); err != nil {
		t.Errorf("a base equal to the cap: %v", err)
	}
}

// TestCapsLiveCounts: from pods placed before the caps (a group past its
// cap), Next never adds to a group at or past its cap, and Victim takes
// from the group past its cap first.
func TestCapsLiveCounts(t *testing.T) {
	m := mustNew(t, gm(0, 1, 3), g(0, 1))
	for _, counts := range [][]int64{{5, 0}, {3, 1}, {6, 6}, {4, 20}} {
		if i := m.Next(counts, All); i != 1 {
			t.Errorf("Next(%v) = %d, want 1", counts, i)
		}
	}
	if v := m.Victim([]int64{6, 6}, All); v != 0 {
		t.Errorf("Victim([6 6]) = %d, want 0 (past its cap)", v)
	}
}

// TestCapsPosition: with caps, every group's c-th pod is where Sequence
// places it, through the groups reaching their caps and several periods
// after; none past a cap.
func TestCapsPosition(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 26))
	tabulated := 0
	for range 400 {
		gs := randomCapped(r)
		m := mustNew(t, gs...)
		p := m.tabulate()
		if !p.ok {
			continue
		}
		tabulated++
		n := int(p.start + 3*p.period + 5)
		counts := make([]int64, len(gs))
		for pos, g := range m.Sequence(n) {
			if g < 0 {
				continue
			}
			counts[g]++
			if got, ok := m.Position(g, counts[g]); !ok || got != int64(pos) {
				t.Fatalf("groups %v: group %d's pod %d at %d (%v), Sequence places it at %d", gs, g, counts[g], got, ok, pos)
			}
		}
		for g, c := range counts {
			if next, ok := m.Position(g, c+1); ok && next < int64(n) {
				t.Fatalf("groups %v: group %d's pod %d at %d, but Sequence(%d) gives it %d pods", gs, g, c+1, next, n, c)
			}
			if gs[g].Max > 0 {
				if _, ok := m.Position(g, gs[g].Max+1); ok {
					t.Fatalf("groups %v: group %d has a position past its cap", gs, g)
				}
			}
		}
	}
	if tabulated < 300 {
		t.Fatalf("only %d of 400 strategies tabulated", tabulated)
	}
}

// TestCapsCountsAtLarge: CountsAt with caps far apart, at replica counts
// past several groups reaching their cap, is stepping.
func TestCapsCountsAtLarge(t *testing.T) {
	m := mustNew(t, gm(0, 7, 500), gm(2, 13, 1700), g(0, 3), gm(0, 11, 40), g(1, 0))
	for _, n := range []int{0, 3, 41, 599, 2000, 5003} {
		if got, want := m.CountsAt(int64(n), All), stepped(m, n, All); !slices.Equal(got, want) {
			t.Errorf("CountsAt(%d) = %v, stepping gives %v", n, got, want)
		}
	}
}

// BenchmarkCountsAtCapped: CountsAt with caps, for the strategy people
// write ("at most 3 on on-demand") and for 64 groups of coprime weights
// near the bound whose caps fall close together, so that it steps across
// many short phases.
func BenchmarkCountsAtCapped(b *testing.B) {
	b.Run("at most 3", func(b *testing.B) {
		m := mustNew(b, gm(0, 1, 3), g(0, 1))
		for b.Loop() {
			m.CountsAt(1001, All)
		}
	})
	b.Run("64 groups", func(b *testing.B) {
		gs := make([]Group, 64)
		for i := range gs {
			gs[i] = gm(0, 149+int64(i%7), 2000+int64(i)*37)
		}
		gs[63].Max = 0
		m := mustNew(b, gs...)
		for b.Loop() {
			m.CountsAt(200_003, All)
		}
	})
}
