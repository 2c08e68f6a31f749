package decision

import (
	"bytes"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// FieldManager is the field manager of apportion's own writes (the API
// server takes it from the client's user agent): a pod's managedFields tell
// apart its deletion cost written by apportion from one another writer
// set, such as Karpenter's own pod deletion-cost controller.
const FieldManager = "apportion"

// costField is how managedFields names the deletion cost annotation.
var costField = []byte(`"f:` + corev1.PodDeletionCost + `"`)

// costFieldSet is the field set of the entries ForeignCostWriters keeps: the
// deletion cost annotation alone.
var costFieldSet = []byte(`{"f:metadata":{"f:annotations":{"f:` + corev1.PodDeletionCost + `":{}}}}`)

// ForeignCostWriters are the entries of managedFields that hold the pod's
// deletion cost annotation for a manager other than apportion and were
// written after the pod was created (a cost in the pod template is the
// owner's, set at creation), each with a field set of that annotation alone:
// what the pod cache keeps of managedFields. nil when there is none, which
// is the rule. It gives the same for a pod it already filtered.
func ForeignCostWriters(pod *corev1.Pod) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, e := range pod.ManagedFields {
		if e.Manager == FieldManager || e.FieldsV1 == nil || !bytes.Contains(e.FieldsV1.Raw, costField) {
			continue
		}
		if e.Time == nil || !e.Time.After(pod.CreationTimestamp.Time) {
			continue
		}
		out = append(out, metav1.ManagedFieldsEntry{Manager: e.Manager, Operation: e.Operation, APIVersion: e.APIVersion,
			Time: e.Time, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: costFieldSet}})
	}
	return out
}

// CostWriter names the manager other than apportion that last wrote the
// pod's deletion cost after its creation; "" when there is none (apportion
// wrote it, the pod template set it, or it has none).
func CostWriter(pod *corev1.Pod) string {
	var who string
	var when time.Time
	for _, e := range ForeignCostWriters(pod) {
		if who == "" || e.Time.After(when) {
			who, when = e.Manager, e.Time.Time
		}
	}
	return who
}
