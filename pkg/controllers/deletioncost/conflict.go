package deletioncost

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

// ReasonSecondWriter is the Warning Event's reason when another controller
// writes the deletion costs of pods apportion orders.
const ReasonSecondWriter = "DeletionCostConflict"

// secondWriterEvery is how often the Event repeats per workload and writer.
const secondWriterEvery = time.Hour

// warnSecondWriter tells that a cost apportion is about to overwrite was
// written by another field manager after the pod's creation: most likely
// Karpenter's own pod deletion-cost controller (its alpha feature gate
// PodDeletionCostManagement), which ranks pods by node. The two would undo
// each other's writes on every change, and a scale-down would follow
// whichever wrote last. apportion keeps writing its own order (the workload's
// split is what its owner asked for); the Warning Event on the workload,
// once an hour per writer, one log line with it, and the counter are what
// an operator sees. The writer's name is tenant input (any client may pick a
// field manager): it goes into the Event's text, never a metric label.
func (c *Controller) warnSecondWriter(ctx context.Context, ref *corev1.ObjectReference, pod *corev1.Pod, writer string) {
	metrics.DeletionCostSecondWriterTotal.Inc()
	if !c.recorder.Publish(apevents.Event{Regarding: ref, Type: corev1.EventTypeWarning, Reason: ReasonSecondWriter, Action: "Order",
		Message: fmt.Sprintf("%s wrote the pod-deletion-cost of pod %s, which apportion maintains for this workload's split; "+
			"if Karpenter's PodDeletionCostManagement feature gate is on, turn it off: the two must not both manage it", writer, pod.Name),
		DedupeValues: []string{string(ref.UID), writer}, DedupeTimeout: secondWriterEvery}) {
		return
	}
	log.FromContext(ctx).Info("another controller writes pod deletion costs; apportion's order is kept",
		"writer", writer, "pod", pod.Name, "workload", ref.Kind+" "+ref.Namespace+"/"+ref.Name)
}
