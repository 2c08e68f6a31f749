package placement

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

// ResultNotWritten is the result label of the decisions metric for a
// decision whose patch kept conflicting, or whose pod was no longer gated
// when read again: nothing was written, and the pod is decided again if it
// still needs it.
const ResultNotWritten = "not_written"

// ResultRefused is the result label of the decisions metric for a decision
// whose patch an admission policy refused: the pod is released unchanged.
const ResultRefused = "refused"

// ReasonRefusedByAdmission is the release reason of a pod whose decision an
// admission policy refused.
const ReasonRefusedByAdmission = "refused_by_admission"

// resends bounds how often a decision is sent again on a fresh copy of the
// pod after a conflict.
const resends = 3

// write sends decision d for pod in one patch (with an optimistic lock) and
// reports whether it was written. A conflict (the cache is behind the pod:
// the scheduler's status update after creation is the usual one) sends the
// same decision again on the pod read from the API server, as long as it is
// still gated: the decision is already counted, and deciding again would
// count it twice or reorder the burst. A pod gone, ungated (released by the
// janitor) or still conflicting is not written; a patch an admission policy
// refuses releases the pod unchanged (refused); any other failure is
// returned for the workqueue to retry. ref is the pod's workload, for the
// refusal's Event.
func (c *Controller) write(ctx context.Context, pod *corev1.Pod, ref *corev1.ObjectReference, d decision.Decision) (reconcile.Result, bool, error) {
	group := ""
	if !d.ArchitectureOnly {
		group = d.Group.Key()
	}
	if res, no := c.notLeading(ctx, group, d.NodePool); no {
		return res, false, nil
	}
	d.Signature = c.signer.Sign(pod.UID, group, d.NodePool, d.Fallback...)
	for attempt := 0; ; attempt++ {
		err := decision.Write(ctx, c.kubeClient, pod, true, func(p *corev1.Pod) { decision.Apply(p, d) })
		switch {
		case err == nil:
			metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(group), metrics.NodePools.Value(d.NodePool), "placed").Inc()
			metrics.GateWaitSeconds.Observe(c.clock.Since(pod.CreationTimestamp.Time).Seconds())
			return reconcile.Result{}, true, nil
		case apierrors.IsNotFound(err):
			return reconcile.Result{}, false, nil
		case apierrors.IsConflict(err):
			fresh := c.stillGated(ctx, pod)
			if fresh == nil || attempt == resends {
				// Rare, and the decisions of the revision made while this
				// one was in flight counted it: say so, so that a record
				// that saw one pod too many can be traced to it.
				metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(group), metrics.NodePools.Value(d.NodePool), ResultNotWritten).Inc()
				log.FromContext(ctx).Info("decision not written: the pod changed under the patch; it is decided again", "group", group,
					"attempts", attempt+1, "stillGated", fresh != nil)
				return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, false, nil
			}
			pod = fresh
		default:
			if r, ok := decision.Refused(err); ok {
				metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(group), metrics.NodePools.Value(d.NodePool), ResultRefused).Inc()
				res, err := c.refused(ctx, pod, ref, r)
				return res, false, err
			}
			metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(group), metrics.NodePools.Value(d.NodePool), "error").Inc()
			return reconcile.Result{}, false, decision.APIError(ctx, decision.OperationDecide, fmt.Errorf("writing the decision: %w", err))
		}
	}
}

// stillGated reads the pod from the API server and returns it when it is
// the same pod, not terminating and still held by the gate; nil otherwise,
// or without an API reader.
func (c *Controller) stillGated(ctx context.Context, pod *corev1.Pod) *corev1.Pod {
	if c.apiReader == nil {
		return nil
	}
	var fresh corev1.Pod
	if err := c.apiReader.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
		return nil
	}
	if fresh.UID != pod.UID || !decision.HasGate(&fresh) || podutil.IsTerminating(&fresh) {
		return nil
	}
	return &fresh
}

// deletionCost is the cost the deletion-cost controller will give a pod
// decided into group g of p, the revision's decided pods per group being
// counts before it (the Tally's: fallback pods included, and the bound
// shadow pods by their node, other strays not); nil
// when it cannot be told, and the deletion-cost controller writes it.
//
// A pod's cost is that of its rank in its group, and a pod placed goes first
// of its group: it takes the group's next rank, whether it is placed by
// quota or by fallback, and leaves every other pod's cost alone. Only a pod
// without a position on the engine's path (a group of weight 0 past its
// base, a period too long to tabulate) is left to the deletion-cost
// controller, which numbers those pods apart.
func (c *Controller) deletionCost(p *compiled.Strategy, counts []int64, g int) *int {
	cost, ok := decision.GroupCost(p.Method, g, counts[g]+1)
	if !ok {
		return nil
	}
	return &cost
}

// release removes the gate without a decision: the pod schedules as if
// apportion were not installed. A pod without the gate (in shadow mode) is
// left as it is: nothing is written, the reason is counted as
// ShadowReason(reason).
func (c *Controller) release(ctx context.Context, pod *corev1.Pod, reason string, cause error) (reconcile.Result, error) {
	if !decision.HasGate(pod) {
		return c.skipShadow(ctx, reason, cause)
	}
	if res, no := c.notLeading(ctx, "", ""); no {
		return res, nil
	}
	if cause != nil {
		log.FromContext(ctx).Error(cause, "releasing pod without a decision", "reason", reason)
	} else {
		log.FromContext(ctx).V(1).Info("releasing pod without a decision", "reason", reason)
	}
	return c.released(ctx, pod, reason, decision.Release(ctx, c.kubeClient, pod))
}

// releaseBeyondCaps releases a gated pod beyond caps (every group with a
// weight is at its cap) without a group, as release does, and in the same
// patch marks it so (decision.MarkBeyondCaps: signed, with the decision
// record rec and its deletion cost, when it has one): running on a capped
// group's node, it is not that group's stray, and the group keeps room for
// its own pods. A patch an admission policy refuses releases the pod
// unchanged (refused); ref is the pod's workload, for the refusal's Event.
func (c *Controller) releaseBeyondCaps(ctx context.Context, pod *corev1.Pod, ref *corev1.ObjectReference, rec decision.Record, cost *int) (reconcile.Result, error) {
	if res, no := c.notLeading(ctx, "", ""); no {
		return res, nil
	}
	log.FromContext(ctx).V(1).Info("releasing pod without a group", "reason", ReasonBeyondCaps, "counts", rec.Counts)
	signature := c.signer.SignBeyondCaps(pod.UID)
	err := decision.Release(ctx, c.kubeClient, pod, func(p *corev1.Pod) { decision.MarkBeyondCaps(p, rec, signature, cost) })
	if r, ok := decision.Refused(err); ok {
		return c.refused(ctx, pod, ref, r)
	}
	return c.released(ctx, pod, ReasonBeyondCaps, err)
}

// released ends a release whose write returned err: counted by reason when
// it landed, retried soon after a conflict (the pod is decided again),
// nothing more for a pod gone, and any other failure back to the workqueue.
func (c *Controller) released(ctx context.Context, pod *corev1.Pod, reason string, err error) (reconcile.Result, error) {
	switch {
	case apierrors.IsConflict(err):
		return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, decision.APIError(ctx, decision.OperationRelease, err)
	}
	metrics.ReleasedTotal.WithLabelValues(reason).Inc()
	metrics.GateWaitSeconds.Observe(c.clock.Since(pod.CreationTimestamp.Time).Seconds())
	return reconcile.Result{}, nil
}

// refused releases a pod whose decision an admission policy refused (a
// ValidatingAdmissionPolicy, Kyverno or Gatekeeper that forbids changing a
// pod's affinity, say). The same patch would be refused again, so it is not
// sent again: the gate alone is removed, which such policies let through,
// and the pod schedules as if apportion were not installed. A Warning Event
// on the workload names the policy, once per warnInterval.
//
// When the gate's removal is refused too, the pod is left gated and nothing
// is retried here: the gate janitor releases it at the gate timeout, or
// keeps trying once per timeout while the policy refuses. A refused shadow
// decision is handled the same way: the gate, if the pod still has it, is
// removed alone.
func (c *Controller) refused(ctx context.Context, pod *corev1.Pod, ref *corev1.ObjectReference, r decision.Refusal) (reconcile.Result, error) {
	metrics.RefusedTotal.WithLabelValues(decision.OperationDecide).Inc()
	logger := log.FromContext(ctx).WithValues("refusedBy", r.By, "message", r.Message)
	if ref != nil {
		c.recorder.Publish(apevents.Event{Regarding: ref, Type: corev1.EventTypeWarning, Reason: "PlacementRefused", Action: "Place",
			Message:      fmt.Sprintf("%s refused apportion's placement: %s; the pods it refuses are released without apportion's placement", r.By, r.Message),
			DedupeValues: []string{string(ref.UID), r.By}, DedupeTimeout: warnInterval})
	}
	if !decision.HasGate(pod) {
		// A shadow decision on a pod already released: nothing to undo.
		logger.Info("shadow decision refused by an admission policy; the pod is left as it is")
		return reconcile.Result{}, nil
	}
	err := decision.Release(ctx, c.kubeClient, pod)
	switch {
	case err == nil:
		logger.Info("placement refused by an admission policy; released the pod unchanged")
		metrics.ReleasedTotal.WithLabelValues(ReasonRefusedByAdmission).Inc()
		metrics.GateWaitSeconds.Observe(c.clock.Since(pod.CreationTimestamp.Time).Seconds())
		return reconcile.Result{}, nil
	case apierrors.IsConflict(err):
		return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, nil
	}
	if rr, ok := decision.Refused(err); ok {
		metrics.RefusedTotal.WithLabelValues(decision.OperationRelease).Inc()
		logger.Info("placement refused by an admission policy, and so was the gate's removal; the gate janitor releases the pod at the gate timeout",
			"releaseRefusedBy", rr.By, "releaseMessage", rr.Message)
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, decision.APIError(ctx, decision.OperationRelease, err)
}
