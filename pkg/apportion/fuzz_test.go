package apportion

import (
	"fmt"
	"slices"
	"testing"
)

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
		grown := true // only pods added so far: the split is CountsAt's
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
					grown = false
				}
				checkQuota(t, m, counts, avail, "after a step")
				if got := m.CountsAt(n, avail); grown && !slices.Equal(got, counts) {
					t.Fatalf("step %d: CountsAt(%d, %b) = %v, stepping gives %v", j, n, avail, got, counts)
				}
			}
		}
	})
}

// FuzzCountsAt: the split CountsAt jumps to at n is the one n steps of Next
// give, for any strategy whose weights fit the bound, any set of available
// groups and n up to 20,000 (several repetitions of the sequence for small
// weights, a part of one for weights near the bound); and Counts is the
// same with every group available. Each group is three bytes: base, then
// the weight in two, cut so that the weights add up to at most
// MaxWeightSum.
func FuzzCountsAt(f *testing.F) {
	f.Add([]byte{2, 0, 1, 0, 0, 3}, uint8(0xff), uint16(10))            // seed 004
	f.Add([]byte{1, 0, 0, 0, 0, 1, 0, 0, 1}, uint8(0xff), uint16(1001)) // seed 000
	f.Add([]byte{0, 19, 135, 0, 19, 137}, uint8(0xff), uint16(20000))   // 4999:5001
	f.Add([]byte{3, 0, 30, 0, 0, 28, 1, 0, 12, 0, 0, 21, 0, 0, 6}, uint8(0b10111), uint16(4321))
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0}, uint8(0b110), uint16(77)) // available weights all 0
	f.Fuzz(func(t *testing.T, spec []byte, mask uint8, steps uint16) {
		var gs []Group
		var sum int64
		for i := 0; i+2 < len(spec) && len(gs) < 8; i += 3 {
			w := int64(spec[i+1])<<8 | int64(spec[i+2])
			w %= max(MaxWeightSum-sum+1, 1)
			sum += w
			gs = append(gs, Group{Base: int64(spec[i] % 8), Weight: w})
		}
		if len(gs) == 0 {
			return
		}
		m := mustNew(t, gs...)
		avail := Set(mask) & (1<<uint(len(gs)) - 1)
		n := int(steps) % 20_001
		want := stepped(m, n, avail)
		if got := m.CountsAt(int64(n), avail); !slices.Equal(got, want) {
			t.Fatalf("groups %v avail %b: CountsAt(%d) = %v, stepping gives %v", gs, avail, n, got, want)
		}
		if got, all := m.Counts(n), stepped(m, n, All); !slices.Equal(got, all) {
			t.Fatalf("groups %v: Counts(%d) = %v, stepping gives %v", gs, n, got, all)
		}
	})
}

// FuzzCaps is FuzzQuota with caps: three bytes a group (base, weight, cap,
// the cap 0 for none and at least the base otherwise). Every step keeps the
// groups below their cap within quota of the capped shares, no group past
// its cap, and the pods Next finds beyond caps those past every cap (the
// scale-downs remove them first, as their deletion cost says); grown from
// none, CountsAt is the split stepping gives.
func FuzzCaps(f *testing.F) {
	f.Add([]byte{0, 1, 3, 0, 1, 0}, uint8(0xff), []byte{7, 7, 0x85, 3}) // at most 3 on on-demand
	f.Add([]byte{0, 1, 2, 0, 1, 3}, uint8(0xff), []byte{7, 0x83, 7})    // every group capped
	f.Add([]byte{2, 1, 3, 0, 3, 0}, uint8(0b01), []byte{7, 7, 0x87, 2}) // the other group out
	f.Add([]byte{1, 0, 4, 0, 5, 2, 0, 7, 9, 3, 2, 3}, uint8(0xff), []byte{7, 7, 7, 7, 0x87, 0x87, 7})
	f.Fuzz(func(t *testing.T, spec []byte, mask uint8, moves []byte) {
		var gs []Group
		for i := 0; i+2 < len(spec) && len(gs) < 8; i += 3 {
			gr := Group{Base: int64(spec[i] % 6), Weight: int64(spec[i+1] % 12)}
			if c := int64(spec[i+2] % 24); c > 0 {
				gr.Max = max(gr.Base, c)
			}
			gs = append(gs, gr)
		}
		if len(gs) == 0 {
			return
		}
		m := mustNew(t, gs...)
		avail := Set(mask) & (1<<uint(len(gs)) - 1)
		if avail == 0 {
			return
		}
		counts := make([]int64, len(gs))
		var n, beyond int64
		grown := true
		for j, mv := range moves[:min(len(moves), 64)] {
			for range mv&7 + 1 {
				switch i := m.Next(counts, avail); {
				case mv&0x80 == 0 && i == BeyondCaps:
					beyond++
					n++
				case mv&0x80 == 0:
					if !avail.Has(i) {
						t.Fatalf("step %d: Next(%v, %b) = %d, not an available group", j, counts, avail, i)
					}
					counts[i]++
					n++
				case n == 0:
					continue
				case beyond > 0:
					beyond--
					n--
					grown = false
				default:
					v := m.Victim(counts, avail)
					if !avail.Has(v) || counts[v] == 0 {
						t.Fatalf("step %d: Victim(%v, %b) = %d, not an available group holding a pod", j, counts, avail, v)
					}
					counts[v]--
					n--
					grown = false
				}
				checkCaps(t, gs, counts, beyond, avail, fmt.Sprintf("step %d", j))
				if got := m.CountsAt(n, avail); grown && !slices.Equal(got, counts) {
					t.Fatalf("step %d: CountsAt(%d, %b) = %v, stepping gives %v", j, n, avail, got, counts)
				}
			}
		}
	})
}
