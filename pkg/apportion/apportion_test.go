package apportion

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func mustNew(t testing.TB, groups ...Group) *Method {
	t.Helper()
	m, err := New(groups)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// g is shorthand for a group in test tables.
func g(base, weight int64) Group { return Group{Base: base, Weight: weight} }

func TestSeedExamples(t *testing.T) {
	for _, tc := range []struct {
		name   string
		groups []Group
		n      int
		counts []int64
		seq    []int
	}{{
		name:   "seed 004: on-demand base 2 weight 1, spot weight 3, 10 replicas",
		groups: []Group{g(2, 1), g(0, 3)},
		n:      10,
		counts: []int64{4, 6},
		seq:    []int{0, 0, 1, 1, 0, 1, 1, 1, 0, 1},
	}, {
		name:   "seed 000: od base 1 weight 0, two spot pools weight 1, 10 replicas (earlier group wins the tie)",
		groups: []Group{g(1, 0), g(0, 1), g(0, 1)},
		n:      10,
		counts: []int64{1, 5, 4},
		seq:    []int{0, 1, 2, 1, 2, 1, 2, 1, 2, 1},
	}, {
		name:   "half on arm64",
		groups: []Group{g(0, 1), g(0, 1)},
		n:      5,
		counts: []int64{3, 2},
		seq:    []int{0, 1, 0, 1, 0},
	}, {
		name:   "bases only fill in order before weights",
		groups: []Group{g(2, 0), g(1, 1), g(0, 2)},
		n:      6,
		counts: []int64{2, 2, 2},
		seq:    []int{0, 0, 1, 2, 1, 2},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustNew(t, tc.groups...)
			if got := m.Sequence(tc.n); !slices.Equal(got, tc.seq) {
				t.Errorf("Sequence(%d) = %v, want %v", tc.n, got, tc.seq)
			}
			if got := m.Counts(tc.n); !slices.Equal(got, tc.counts) {
				t.Errorf("Counts(%d) = %v, want %v", tc.n, got, tc.counts)
			}
		})
	}
}

func TestShares(t *testing.T) {
	m := mustNew(t, g(2, 1), g(0, 3))
	for _, tc := range []struct {
		n    int64
		want []float64
	}{{0, []float64{0, 0}}, {1, []float64{1, 0}}, {2, []float64{2, 0}}, {3, []float64{2.25, 0.75}}, {10, []float64{4, 6}}} {
		sh := m.Shares(tc.n, All)
		for i, w := range tc.want {
			if sh[i].Float() != w {
				t.Errorf("n=%d: share[%d] = %v, want %v", tc.n, i, sh[i].Float(), w)
			}
		}
	}
	if sh := m.Shares(5, All.Without(0)); sh[0].Float() != 0 || sh[1].Float() != 5 {
		t.Errorf("with group 0 unavailable: shares %v, want [0 5]", sh)
	}
}

func TestNewRejects(t *testing.T) {
	for _, gs := range [][]Group{
		nil, {g(-1, 1)}, {g(0, -1)}, {g(0, maxValue+1)}, make([]Group, MaxGroups+1),
		{g(0, MaxWeightSum/2+1), g(0, MaxWeightSum/2)}, // one past the bound
		{g(0, maxValue), g(2, 0), g(0, maxValue-1)},    // large and coprime
		{g(0, 2*MaxWeightSum-2), g(0, 4)},              // 2 in common: still one past
	} {
		if _, err := New(gs); err == nil {
			t.Errorf("New(%v) succeeded, want an error", gs)
		}
	}
	// The sum that counts is in lowest terms.
	for _, gs := range [][]Group{
		{g(0, MaxWeightSum/2), g(0, MaxWeightSum/2)},
		{g(0, maxValue), g(maxValue, 0)},
		{g(0, 2*MaxWeightSum-2), g(0, 2)},
		{g(0, 1_000_000_000), g(0, 2_000_000_000)},
	} {
		if _, err := New(gs); err != nil {
			t.Errorf("New(%v): %v", gs, err)
		}
	}
}

// randomGroups draws a strategy the way users write them: a few groups, small
// bases, small weights, at least one positive weight.
func randomGroups(r *rand.Rand) []Group {
	k := 1 + r.IntN(7)
	gs := make([]Group, k)
	anyWeight := false
	for i := range gs {
		if r.IntN(3) == 0 {
			gs[i].Base = int64(r.IntN(6))
		}
		if r.IntN(5) > 0 {
			gs[i].Weight = int64(r.IntN(12))
		}
		if r.IntN(10) == 0 {
			gs[i].Weight = int64(r.IntN(1000))
		}
		anyWeight = anyWeight || gs[i].Weight > 0
	}
	if !anyWeight {
		gs[r.IntN(k)].Weight = 1 + int64(r.IntN(5))
	}
	return gs
}

func checkQuota(t *testing.T, m *Method, counts []int64, avail Set, step string) {
	t.Helper()
	if !m.WithinQuota(counts, avail) {
		var n int64
		for _, c := range counts {
			n += c
		}
		t.Fatalf("%s: counts %v (n=%d) are off quota; shares %v; groups %v", step, counts, n, m.Shares(n, avail), m.groups)
	}
}

// TestQuotaEveryPrefixUpAndDown is the accuracy contract: for many strategies,
// every prefix of the sequence is within quota going up, every step of
// removals chosen by Victim is within quota going down, and scaling back up
// from there stays within quota too.
func TestQuotaEveryPrefixUpAndDown(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	strategies := 1000
	if testing.Short() {
		strategies = 300
	}
	for s := 0; s < strategies; s++ {
		m := mustNew(t, randomGroups(r)...)
		top := 1 + r.IntN(250)
		counts := make([]int64, m.Len())
		seq := m.Sequence(top)
		for j, gi := range seq {
			prev := slices.Clone(counts)
			counts[gi]++
			checkQuota(t, m, counts, All, fmt.Sprintf("strategy %d up to %d", s, j+1))
			if got := m.Next(prev, All); got != gi {
				t.Fatalf("Next(%v) = %d but Sequence put pod %d in %d", prev, got, j+1, gi)
			}
		}
		// Removing in reverse sequence order revisits the same prefixes.
		down := slices.Clone(counts)
		for j := len(seq) - 1; j >= 0; j-- {
			down[seq[j]]--
			checkQuota(t, m, down, All, fmt.Sprintf("strategy %d reverse to %d", s, j))
		}
		// Scale down by Victim to a random size, then back up by Next.
		low := r.IntN(top + 1)
		for n := top; n > low; n-- {
			v := m.Victim(counts, All)
			if v < 0 || counts[v] == 0 {
				t.Fatalf("Victim(%v) = %d", counts, v)
			}
			counts[v]--
			checkQuota(t, m, counts, All, fmt.Sprintf("strategy %d victim down to %d", s, n-1))
		}
		for n := low; n < top+50; n++ {
			counts[m.Next(counts, All)]++
			checkQuota(t, m, counts, All, fmt.Sprintf("strategy %d %d->%d then up to %d", s, top, low, n+1))
		}
	}
}

// violation is how far counts are from quota at their own total.
func violation(m *Method, counts []int64, avail Set) int64 {
	var n int64
	for i, c := range counts {
		if avail.Has(i) {
			n += c
		}
	}
	var v int64
	for i, sh := range m.Shares(n, avail) {
		if !avail.Has(i) {
			continue
		}
		if counts[i] < sh.Lower {
			v += sh.Lower - counts[i]
		}
		if counts[i] > sh.Upper() {
			v += counts[i] - sh.Upper()
		}
	}
	return v
}

// TestLiveDecisionsOnAnyCounts: from arbitrary (often off-quota) splits, Next
// and Victim choose a step that leaves the split as close to quota as any
// single step can, and repeated steps reach quota.
func TestLiveDecisionsOnAnyCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for s := 0; s < 5000; s++ {
		m := mustNew(t, randomGroups(r)...)
		counts := make([]int64, m.Len())
		for i := range counts {
			counts[i] = int64(r.IntN(20))
		}
		avail := All
		if r.IntN(4) == 0 {
			avail = avail.Without(r.IntN(m.Len()))
		}
		bestUp, bestDown := int64(1<<62), int64(1<<62)
		anyAvail, anyPods := false, false
		for i := range counts {
			if !avail.Has(i) {
				continue
			}
			anyAvail = true
			counts[i]++
			bestUp = min(bestUp, violation(m, counts, avail))
			counts[i]--
			if counts[i] > 0 {
				anyPods = true
				counts[i]--
				bestDown = min(bestDown, violation(m, counts, avail))
				counts[i]++
			}
		}
		if nx := m.Next(counts, avail); !anyAvail {
			if nx != -1 {
				t.Fatalf("Next with no available group = %d", nx)
			}
		} else {
			if nx < 0 || !avail.Has(nx) {
				t.Fatalf("Next(%v, %b) = %d: not an available group", counts, avail, nx)
			}
			counts[nx]++
			if v := violation(m, counts, avail); v != bestUp {
				t.Fatalf("Next chose group %d: violation %d, best single step gives %d (counts after %v, groups %v)", nx, v, bestUp, counts, m.groups)
			}
			counts[nx]--
		}
		if vi := m.Victim(counts, avail); !anyPods {
			if vi != -1 {
				t.Fatalf("Victim with no pods = %d", vi)
			}
		} else {
			if vi < 0 || !avail.Has(vi) || counts[vi] == 0 {
				t.Fatalf("Victim(%v, %b) = %d", counts, avail, vi)
			}
			counts[vi]--
			if v := violation(m, counts, avail); v != bestDown {
				t.Fatalf("Victim chose group %d: violation %d, best single step gives %d (counts after %v, groups %v)", vi, v, bestDown, counts, m.groups)
			}
			counts[vi]++
		}
	}
}

// TestRandomWalkStaysWithinQuota: any mix of scale-ups (Next) and scale-downs
// (Victim) from an empty workload keeps every step within quota. Both
// directions are earliest-deadline-first schedules, which are optimal, and
// every split they produce lies on some complete quota path, so the next
// step, up or down, has a way to stay within quota.
func TestRandomWalkStaysWithinQuota(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for s := 0; s < 500; s++ {
		m := mustNew(t, randomGroups(r)...)
		counts := make([]int64, m.Len())
		n := 0
		for step := 0; step < 60; step++ {
			// Runs of one direction, like a scale from 100 to 37 to 80.
			up := r.IntN(2) == 0 || n == 0
			for run := 1 + r.IntN(60); run > 0 && (up || n > 0); run-- {
				if up {
					counts[m.Next(counts, All)]++
					n++
				} else {
					counts[m.Victim(counts, All)]--
					n--
				}
				checkQuota(t, m, counts, All, fmt.Sprintf("strategy %v walk step %d", m.groups, step))
			}
		}
	}
}

// TestUnavailableGroupsRenormalise: with some groups unavailable, the
// decisions are those of the strategy made of the available groups alone.
func TestUnavailableGroupsRenormalise(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for s := 0; s < 1000; s++ {
		gs := randomGroups(r)
		if len(gs) < 2 {
			continue
		}
		m := mustNew(t, gs...)
		drop := r.IntN(len(gs))
		var sub []Group
		var idx []int
		for i, gr := range gs {
			if i != drop {
				sub = append(sub, gr)
				idx = append(idx, i)
			}
		}
		subWeights := int64(0)
		for _, gr := range sub {
			subWeights += gr.Weight
		}
		if subWeights == 0 {
			// Every remaining weight is 0: the rest is shared equally.
			for i := range sub {
				sub[i].Weight = 1
			}
		}
		ms := mustNew(t, sub...)
		counts := make([]int64, len(gs))
		counts[drop] = int64(r.IntN(5)) // pods stranded on the unavailable group
		subCounts := make([]int64, len(sub))
		for j := 0; j < 60; j++ {
			got := m.Next(counts, All.Without(drop))
			want := idx[ms.Next(subCounts, All)]
			if got != want {
				t.Fatalf("groups %v without %d: pod %d went to %d, sub-strategy says %d", gs, drop, j+1, got, want)
			}
			counts[got]++
			subCounts[ms.Next(subCounts, All)]++
		}
	}
}

func BenchmarkNext10Groups(b *testing.B) {
	benchmark10Groups(b, func(m *Method, counts []int64) int { return m.Next(counts, All) })
}

func BenchmarkVictim10Groups(b *testing.B) {
	benchmark10Groups(b, func(m *Method, counts []int64) int { return m.Victim(counts, All) })
}

// BenchmarkNext10GroupsCapped: the same with every other group capped,
// three of them at their cap at 1000 pods.
func BenchmarkNext10GroupsCapped(b *testing.B) {
	benchmark10Groups(b, func(m *Method, counts []int64) int { return m.Next(counts, All) }, 30, 60, 90, 400, 900)
}

// benchmark10Groups times pick over ten groups holding 1000 pods, the
// even-numbered ones capped at caps, in order.
func benchmark10Groups(b *testing.B, pick func(*Method, []int64) int, caps ...int64) {
	gs := make([]Group, 10)
	for i := range gs {
		gs[i] = Group{Base: int64(i % 3), Weight: int64(1 + i)}
		if i%2 == 0 && i/2 < len(caps) {
			gs[i].Max = caps[i/2]
		}
	}
	m := mustNew(b, gs...)
	counts := m.Counts(1000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if pick(m, counts) < 0 {
			b.Fatal("no group")
		}
	}
}
