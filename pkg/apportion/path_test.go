package apportion

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPositionIsSequence: for random strategies (all weights 0 included),
// every group's c-th pod is where Sequence places it, over several periods;
// a group the path gives no c-th pod (weight 0 past its base) has none.
func TestPositionIsSequence(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 1))
	for trial := range 400 {
		gs := randomGroups(r)
		if trial%10 == 0 {
			for i := range gs {
				gs[i].Weight = 0
			}
		}
		m := mustNew(t, gs...)
		p := m.tabulate()
		if !p.ok {
			continue // a period past MaxPeriod: TestPositionLongPeriod
		}
		n := int(p.bases + 3*p.period + int64(r.IntN(int(p.period))))
		counts := make([]int64, len(gs))
		for pos, g := range m.Sequence(n) {
			counts[g]++
			if got, ok := m.Position(g, counts[g]); !ok || got != int64(pos) {
				t.Fatalf("groups %v: group %d's pod %d at %d (%v), Sequence places it at %d", gs, g, counts[g], got, ok, pos)
			}
		}
		for g, c := range counts {
			if next, ok := m.Position(g, c+1); ok && next < int64(n) {
				t.Fatalf("groups %v: group %d's pod %d at %d, but Sequence(%d) gives it %d pods", gs, g, c+1, next, n, c)
			}
			if gs[g].Weight == 0 && trial%10 != 0 {
				if _, ok := m.Position(g, gs[g].Base+1); ok {
					t.Fatalf("groups %v: group %d (weight 0) has a position past its base", gs, g)
				}
			}
		}
	}
}

// TestPositionLongPeriod: past MaxPeriod, only the bases have positions;
// positions past math.MaxInt32 are none.
func TestPositionLongPeriod(t *testing.T) {
	m := mustNew(t, g(2, 1), g(0, MaxPeriod))
	if pos, ok := m.Position(0, 2); !ok || pos != 1 {
		t.Fatalf("second base pod at %d (%v), want 1", pos, ok)
	}
	if _, ok := m.Position(1, 1); ok {
		t.Fatal("a position past the bases with a period longer than MaxPeriod")
	}
	big := mustNew(t, g(math.MaxInt32, 1), g(math.MaxInt32, 1))
	if _, ok := big.Position(1, 2); ok {
		t.Fatal("a position past math.MaxInt32")
	}
	if _, ok := mustNew(t, g(0, 1)).Position(0, math.MaxInt32+2); ok {
		t.Fatal("a position past math.MaxInt32")
	}
}
