package apportion

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// stepped is the split after n steps of Next from no pod.
func stepped(m *Method, n int, avail Set) []int64 {
	counts := make([]int64, m.Len())
	for range n {
		g := m.Next(counts, avail)
		if g < 0 {
			break
		}
		counts[g]++
	}
	return counts
}

// TestCountsAtIsStepping: the closed form equals stepping Next, for every n
// up to several periods, over random strategies and sets of available
// groups (weights up to 1,000 included, and strategies whose available
// weights are all 0).
func TestCountsAtIsStepping(t *testing.T) {
	r := rand.New(rand.NewPCG(14, 8))
	for trial := range 400 {
		gs := randomGroups(r)
		if trial%10 == 0 {
			for i := range gs {
				gs[i].Weight = 0
			}
		}
		m := mustNew(t, gs...)
		avail := All
		for i := range gs {
			if r.IntN(4) == 0 {
				avail = avail.Without(i)
			}
		}
		limit := 300
		if trial%40 == 0 {
			limit = 5000
		}
		counts := make([]int64, m.Len())
		for n := 0; n <= limit; n++ {
			if got := m.CountsAt(int64(n), avail); !slices.Equal(got, counts) {
				t.Fatalf("groups %v avail %b: CountsAt(%d) = %v, stepping gives %v", gs, avail, n, got, counts)
			}
			g := m.Next(counts, avail)
			if g < 0 {
				break // no group available
			}
			counts[g]++
		}
	}
}

func TestCountsAtSeeds(t *testing.T) {
	seed004 := mustNew(t, g(2, 1), g(0, 3))
	for _, tc := range []struct {
		n     int64
		avail Set
		want  []int64
	}{
		{0, All, []int64{0, 0}},
		{1, All, []int64{1, 0}},
		{10, All, []int64{4, 6}},
		{10_000_002, All, []int64{2_500_002, 7_500_000}},
		{7, All.Without(1), []int64{7, 0}},
		{7, All.Without(0), []int64{0, 7}},
		{-1, All, []int64{0, 0}},
		{5, 0, []int64{0, 0}},
	} {
		if got := seed004.CountsAt(tc.n, tc.avail); !slices.Equal(got, tc.want) {
			t.Errorf("seed 004 CountsAt(%d, %b) = %v, want %v", tc.n, tc.avail, got, tc.want)
		}
	}
	if got, want := seed004.CountsAt(1001, All), stepped(seed004, 1001, All); !slices.Equal(got, want) {
		t.Errorf("CountsAt(1001) = %v, stepping gives %v", got, want)
	}
}

// BenchmarkCountsAt: seed 004 at ten million replicas, the closed form and,
// for comparison, stepping (what PlacementPolicy status did per reconcile).
func BenchmarkCountsAt(b *testing.B) {
	m := mustNew(b, g(2, 1), g(0, 3))
	const n = 10_000_000
	b.Run("closed", func(b *testing.B) {
		for b.Loop() {
			m.CountsAt(n, All)
		}
	})
	b.Run("stepping", func(b *testing.B) {
		for b.Loop() {
			stepped(m, n, All)
		}
	})
}

// BenchmarkCounts: the split at the largest replica count for the worst
// weights the bound lets through, over 2 and 64 groups: coprime, adding up
// to (nearly) MaxWeightSum, with a base that leaves the longest partial
// repetition to step (one pod short of the whole).
func BenchmarkCounts(b *testing.B) {
	many := make([]Group, MaxGroups)
	for i := range many {
		many[i] = g(0, int64(124+i)) // 9952 in all, consecutive so coprime
	}
	many[0].Base = 1280 // (MaxInt32 - 1280) mod 9952 = 9951
	for _, bc := range []struct {
		name   string
		groups []Group
	}{
		// (MaxInt32 - 3648) mod 10000 = 9999
		{"2 groups", []Group{g(3648, MaxWeightSum/2-1), g(0, MaxWeightSum/2+1)}},
		{"64 groups", many},
	} {
		m := mustNew(b, bc.groups...)
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				m.Counts(math.MaxInt32)
			}
		})
	}
}
