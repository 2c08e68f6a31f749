package decision

import (
	"bytes"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apportion-dev/apportion/pkg/apportion"
)

// The deletion costs (the deletion-cost controller's package doc has the
// whole scheme): the placement controller writes a new pod's cost with its
// decision, so both take the numbers from here. A decided pod's cost is
// minus its position on the engine's path, which a pod of a workload grown
// by the engine from none holds: from 0 for the pod kept last down to
// -(pods-1), and below that for the pods a group holds past what the path
// gives it at the workload's size, such as pods placed while another group
// was out of capacity.
const (
	// StrayCost is the cost of a pod without a decision, or decided in a
	// group its strategy no longer has: below every other cost.
	StrayCost = -(1 << 30)
	// OffPathCost is the highest cost of a decided pod without a position
	// on the engine's path (a group of weight 0 past its base, a strategy
	// whose period is too long to tabulate): the one a scale-down removes
	// last among them. Every position above it.
	OffPathCost = -(1 << 29)
)

// SplitCost is the cost of the pod a scale-down removes first from a split of
// pods pods that the engine grew: the costs number from the bottom, so the
// last pod left has 0.
func SplitCost(pods int) int { return -(pods - 1) }

// GroupCost is the cost of group g's c-th pod (c from 1, its rank in the
// group counted from the pod a scale-down removes last): minus its position
// on the engine's path (apportion.Method.Position). ok is false when it has
// none above OffPathCost; the pod is then numbered among those with
// OffPathPodCost.
func GroupCost(m *apportion.Method, g int, c int64) (cost int, ok bool) {
	pos, ok := m.Position(g, c)
	if !ok || pos >= -OffPathCost {
		return 0, false
	}
	return -int(pos), true
}

// OffPathPodCost is the cost of the pod without a position a scale-down
// removes first among offPathPods of them: they number down from
// OffPathCost.
func OffPathPodCost(offPathPods int) int { return OffPathCost - (offPathPods - 1) }

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
const costFieldSet = `{"f:metadata":{"f:annotations":{"f:` + corev1.PodDeletionCost + `":{}}}}`

// ForeignCostWriters are the entries of managedFields that hold the pod's
// deletion cost annotation for a manager other than apportion and were
// written after the pod was created (a cost in the pod template is the
// owner's, set at creation), each with a field set of that annotation alone:
// what the pod cache keeps of managedFields. nil when there is none, which
// is the rule. It gives the same for a pod it already filtered.
func ForeignCostWriters(pod *corev1.Pod) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, e := range pod.ManagedFields {
		if e.Manager == FieldManager || e.FieldsV1 == nil || !bytes.Contains(e.FieldsV1.GetRawBytes(), costField) {
			continue
		}
		if e.Time == nil || !e.Time.After(pod.CreationTimestamp.Time) {
			continue
		}
		out = append(out, metav1.ManagedFieldsEntry{Manager: e.Manager, Operation: e.Operation, APIVersion: e.APIVersion,
			Time: e.Time, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(costFieldSet)})
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
