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
// (n - bases) mod P pods of the last, partial period are stepped:
// O(groups * min(n, P)), which for the weights people write (P of 4 for
// the AWS sample's 1:3) is a few steps at any n.
func (m *Method) CountsAt(n int64, avail Set) []int64 {
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
	for range rest {
		counts[m.Next(counts, avail)]++
	}
	return counts
}

func gcdOf(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
