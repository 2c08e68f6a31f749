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

	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

// write sends decision d for pod in one patch (with an optimistic lock) and
// reports whether it was written; a conflict decides again from the fresh
// object, any other failure is returned for the workqueue to retry (until the
// gate janitor releases the pod).
func (c *Controller) write(ctx context.Context, pod *corev1.Pod, d decision.Decision) (reconcile.Result, bool, error) {
	group := ""
	if !d.ArchitectureOnly {
		group = d.Group.Key()
	}
	d.Signature = c.signer.Sign(pod.UID, group, d.NodePool, d.Fallback...)
	patched := pod.DeepCopy()
	decision.Apply(patched, d)
	if err := c.kubeClient.Patch(ctx, patched, client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, false, nil
		}
		if apierrors.IsConflict(err) {
			// The cache is behind this pod (or the janitor released it):
			// decide again from the fresh object.
			return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, false, nil
		}
		metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(group), metrics.NodePools.Value(d.NodePool), "error").Inc()
		return reconcile.Result{}, false, decision.APIError(ctx, decision.OperationDecide, fmt.Errorf("writing the decision: %w", err))
	}
	metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(group), metrics.NodePools.Value(d.NodePool), "placed").Inc()
	metrics.GateWaitSeconds.Observe(c.clock.Since(pod.CreationTimestamp.Time).Seconds())
	return reconcile.Result{}, true, nil
}

// release removes the gate without a decision: the pod schedules as if
// apportion were not installed.
func (c *Controller) release(ctx context.Context, pod *corev1.Pod, reason string, cause error) (reconcile.Result, error) {
	if cause != nil {
		log.FromContext(ctx).Error(cause, "releasing pod without a decision", "reason", reason)
	} else {
		log.FromContext(ctx).V(1).Info("releasing pod without a decision", "reason", reason)
	}
	if err := decision.Release(ctx, c.kubeClient, pod); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, decision.APIError(ctx, decision.OperationRelease, err)
	}
	metrics.ReleasedTotal.WithLabelValues(reason).Inc()
	metrics.GateWaitSeconds.Observe(c.clock.Since(pod.CreationTimestamp.Time).Seconds())
	return reconcile.Result{}, nil
}
