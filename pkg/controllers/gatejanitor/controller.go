// Package gatejanitor guarantees that apportion never blocks a pod: every
// replica (leader or not) releases pods that have been held by the placement
// gate longer than the gate timeout without a decision, with a Warning Event
// on the pod and a metric. It is what keeps pods moving when the placement
// leader is gone, slow, or cannot decide. It releases through
// decision.Release, as the placement controller does; a failed release is
// returned for the workqueue to retry with backoff, but one an admission
// policy refuses is tried again once per gate timeout.
//
// The timeout counts from the later of the pod's creation and the last
// change of placement leader (the Lease's acquireTime): a new leader first
// decides the pods its predecessor left gated, and those pods must not be
// released merely because the leader changed while they waited. A leader
// that is alive but never decides still has its pods released on time.
//
// Whatever the Lease says, a pod waits at most MaxWaitTimeouts gate timeouts
// from its creation: a leader that keeps changing (crash-looping) would
// otherwise restart the count for ever. An acquireTime in the future (the
// leader's clock runs ahead) counts as now.
package gatejanitor

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/lease"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/podcache"
)

// MaxWaitTimeouts bounds a gated pod's wait, in gate timeouts from its
// creation. Three leave a single takeover its whole timeout: a pod gated
// just before its leader died waits for the Lease to expire (15-17 s with
// the defaults) and a timeout more, about 2.5 timeouts of 30 s.
const MaxWaitTimeouts = 3

// Controller releases pods gated for longer than Timeout.
type Controller struct {
	kubeClient client.Client
	clock      clock.Clock
	recorder   events.EventRecorder
	timeout    time.Duration
	lease      *lease.Watch // the placement leader's Lease; nil: no leader election
}

// NewController builds the janitor.
func NewController(clk clock.Clock, kubeClient client.Client, recorder events.EventRecorder, timeout time.Duration) *Controller {
	return &Controller{kubeClient: kubeClient, clock: clk, recorder: recorder, timeout: timeout}
}

// WithLease counts each pod's timeout from the last change of holder of the
// placement leader's Lease too, when that is later than the pod's creation.
// w is the Lease as its informer shows it.
func (c *Controller) WithLease(w *lease.Watch) *Controller {
	c.lease = w
	return c
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "gatejanitor" }

// Register adds the janitor to the manager; it runs on every replica.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			gates, ok := podcache.Gates(o)
			return ok && decision.GatedBy(gates)
		}))).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 2}).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}

// Reconcile releases the pod once its gate is older than the timeout, and
// otherwise comes back when it will be.
func (c *Controller) Reconcile(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	if !decision.HasGate(pod) || podutil.IsTerminating(pod) {
		return reconcile.Result{}, nil
	}
	age := c.clock.Since(pod.CreationTimestamp.Time)
	if wait := c.deadline(pod).Sub(c.clock.Now()); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	if err := decision.Release(ctx, c.kubeClient, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil // decided or released meanwhile; look again
		}
		if r, ok := decision.Refused(err); ok {
			// An admission policy that refuses even the gate's removal
			// refuses it again at once: try once per timeout, in case
			// the policy changes, not at the workqueue's backoff.
			metrics.RefusedTotal.WithLabelValues(decision.OperationRelease).Inc()
			c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, "PlacementReleaseRefused", "Release",
				"%s refused the removal of the placement gate: %s; the pod stays gated until the policy lets it through", r.By, r.Message)
			log.FromContext(ctx).Info("the gate's removal was refused by an admission policy; trying again after the gate timeout",
				"refusedBy", r.By, "message", r.Message)
			return reconcile.Result{RequeueAfter: c.timeout}, nil
		}
		return reconcile.Result{}, decision.APIError(ctx, decision.OperationRelease, err)
	}
	metrics.ReleasedTotal.WithLabelValues("timeout").Inc()
	metrics.GateWaitSeconds.Observe(age.Seconds())
	c.recorder.Eventf(pod, nil, corev1.EventTypeWarning, "PlacementTimeout", "Release",
		"no placement decision within %s; released to schedule without apportion", c.timeout)
	log.FromContext(ctx).Info("released pod after gate timeout", "waited", age.Round(time.Millisecond).String())
	return reconcile.Result{}, nil
}

// deadline is when the pod is released: a gate timeout after since, and
// MaxWaitTimeouts gate timeouts after its creation at the latest.
func (c *Controller) deadline(pod *corev1.Pod) time.Time {
	limit := pod.CreationTimestamp.Add(MaxWaitTimeouts * c.timeout)
	if at := c.since(pod).Add(c.timeout); at.Before(limit) {
		return at
	}
	return limit
}

// since is when the pod's gate timeout starts: its creation, or the last
// change of placement leader when that came later (now, when the Lease says
// it comes later still). The Lease is read as its informer's events left it;
// while it is not cached, the pod's creation counts.
func (c *Controller) since(pod *corev1.Pod) time.Time {
	start := pod.CreationTimestamp.Time
	s, cached := c.lease.Spec()
	if !cached || !s.AcquireTime.After(start) {
		return start
	}
	if now := c.clock.Now(); s.AcquireTime.After(now) {
		// Written by a leader whose clock runs ahead: counting from
		// it would hold the pod for as long as the clocks differ.
		return now
	}
	return s.AcquireTime
}
