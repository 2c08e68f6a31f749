package decision

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// The deletion costs below the split's, which numbers its pods from
// -(pods-1) up to 0 (the deletion-cost controller's package doc has the
// whole scheme): the placement controller writes a new pod's cost with its
// decision when it can tell what the deletion-cost controller will compute,
// so both take the numbers from here.
const (
	// StrayCost is the cost of a pod without a decision, or decided in a
	// group its strategy no longer has: below every other cost.
	StrayCost = -(1 << 30)
	// FallbackCost is the highest cost of a pod placed by capacity
	// fallback: the one a scale-down removes last among them.
	FallbackCost = -(1 << 29)
)

// SplitCost is the cost of the pod a scale-down removes first from a split of
// pods pods (fallback pods and strays not counted): the costs number from
// the bottom, so the last pod left has 0.
func SplitCost(pods int) int { return -(pods - 1) }

// FallbackPodCost is the cost of the fallback pod a scale-down removes first
// among fallbackPods of them: they number down from FallbackCost.
func FallbackPodCost(fallbackPods int) int { return FallbackCost - (fallbackPods - 1) }

// DeletionCost reads the pod's deletion cost annotation; ok is false when it
// has none, or one that is not an integer.
func DeletionCost(pod *corev1.Pod) (cost int, ok bool) {
	v, found := pod.Annotations[corev1.PodDeletionCost]
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}
