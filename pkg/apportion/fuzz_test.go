package apportion

import "testing"

// fuzzGroups reads a strategy from spec, two bytes a group (base, weight),
// kept small so that every exec walks its whole path quickly: at most 8
// groups, bases below 6, weights below 12.
func fuzzGroups(spec []byte) []Group {
	var gs []Group
	for i := 0; i+1 < len(spec) && len(gs) < 8; i += 2 {
		gs = append(gs, Group{Base: int64(spec[i] % 6), Weight: int64(spec[i+1] % 12)})
	}
	return gs
}

// FuzzQuota is the accuracy contract of the package doc for any strategy,
// any fixed set of available groups and any mix of scale-ups and
// scale-downs from an empty workload: every step (Next adding a pod, Victim
// removing one) leaves the split within quota over the available groups,
// and neither ever picks an unavailable group (or, for Victim, an empty one).
// Each byte of moves is up to 8 pods added (high bit clear) or removed (set).
func FuzzQuota(f *testing.F) {
	f.Add([]byte{2, 1, 0, 3}, uint8(0xff), []byte{10, 0x84, 6, 0x87, 7})       // seed 004
	f.Add([]byte{1, 0, 0, 1, 0, 1}, uint8(0xff), []byte{10, 0x85, 3})          // seed 000
	f.Add([]byte{2, 0, 1, 1, 0, 2}, uint8(0b101), []byte{7, 7, 0x83, 0x85, 4}) // one group out
	f.Add([]byte{0, 0, 3, 0}, uint8(0xff), []byte{7, 0x82, 5})                 // every weight 0
	f.Add([]byte{5, 11, 4, 7, 0, 5, 3, 1, 1, 0}, uint8(0b11010), []byte{7, 7, 7, 0x87, 7, 0x87, 0x87})
	f.Fuzz(func(t *testing.T, spec []byte, mask uint8, moves []byte) {
		gs := fuzzGroups(spec)
		if len(gs) == 0 {
			return
		}
		m := mustNew(t, gs...)
		avail := Set(mask) & (1<<uint(len(gs)) - 1)
		if avail == 0 {
			if m.Next(make([]int64, len(gs)), avail) != -1 {
				t.Fatal("Next chose a group with none available")
			}
			return
		}
		counts := make([]int64, len(gs))
		var n int64
		for j, mv := range moves[:min(len(moves), 64)] {
			for range mv&7 + 1 {
				if mv&0x80 == 0 {
					i := m.Next(counts, avail)
					if !avail.Has(i) {
						t.Fatalf("step %d: Next(%v, %b) = %d, not an available group", j, counts, avail, i)
					}
					counts[i]++
					n++
				} else {
					i := m.Victim(counts, avail)
					if n == 0 {
						if i != -1 {
							t.Fatalf("step %d: Victim of an empty workload = %d, want -1", j, i)
						}
						continue
					}
					if !avail.Has(i) || counts[i] == 0 {
						t.Fatalf("step %d: Victim(%v, %b) = %d, not an available group holding a pod", j, counts, avail, i)
					}
					counts[i]--
					n--
				}
				checkQuota(t, m, counts, avail, "after a step")
			}
		}
	})
}
