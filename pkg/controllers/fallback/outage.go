package fallback

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

// recheckLead is how long before an outage's end its evidence is checked
// again, so that a pool whose evidence still holds never looks available.
const recheckLead = 2 * time.Second

// Results of a recheck (metric label values).
const (
	RecheckStill   = "still"
	RecheckLifted  = "lifted"
	RecheckExpired = "expired"
)

// outage is the evidence a key was marked out on (Karpenter mode): a
// NodePool out for every workload, or for one (a scoped key).
type outage struct {
	reason string
	marked time.Time
	limits limitsOf // the pool's limits and usage (wide: reason limits only)
	// template is the pool's NodeClaim template when a workload's key was
	// marked (nil: not known).
	template *karpv1.NodeClaimTemplate
}

// maxOutages bounds the outages whose evidence is kept: one per NodePool
// and per workload and NodePool.
const maxOutages = 16384

// recordOutage keeps the evidence of a new outage of key; a cluster-wide
// one is handed to the NodePool outage controller to watch, a workload's
// waits for its NodePool's next change. sig.np is the NodePool the
// evidence saw (read from the cache when the signal has none).
func (c *Controller) recordOutage(ctx context.Context, key capacity.Key, sig signal) {
	o := outage{reason: sig.reason, marked: c.clock.Now()}
	np := sig.np
	if np == nil && key.Scope() != "" {
		got := &karpv1.NodePool{}
		if err := c.kubeClient.Get(ctx, client.ObjectKey{Name: key.Name()}, got); err == nil {
			np = got
		}
	}
	if np != nil && (sig.reason == ReasonLimits || key.Scope() != "") {
		o.limits = snapshotLimits(np)
	}
	if np != nil && key.Scope() != "" {
		o.template = np.Spec.Template.DeepCopy()
	}
	c.mu.Lock()
	if len(c.outages) >= maxOutages {
		for k := range c.outages {
			if out, _, _ := c.tracker.Unavailable(k); !out {
				delete(c.outages, k)
			}
		}
		if len(c.outages) >= maxOutages {
			c.outages = map[capacity.Key]outage{}
		}
	}
	c.outages[key] = o
	c.mu.Unlock()
	if key.Scope() != "" {
		return
	}
	ev := poolEvent{Object: &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: key.Name()}}}
	select {
	case c.rechecks <- ev:
	default: // full: the NodePool's next update, or its pods, bring it
	}
}

// ReconcilePool follows a NodePool's outages when it changes. A workload's
// outage of it ends at once when the pool's state no longer stands behind
// it (scopedGone: its limits grown, its template changed). The
// cluster-wide outage ends at once when its evidence is gone (limits raised
// or usage lower, room left for an instance type the pool allows, the pool
// Ready again, its requirements allowing an instance type), and is kept
// out for another outage when the cluster's state still backs it at its
// end (the pool at its limits, not Ready or left no instance type by its
// requirements, a launch failure since), so that pods are not sent back to
// a pool that still cannot launch. Each is the question that marked the
// pool, asked again (limitsHold, noTypesHold, poolState). Any other
// outage (launch failures with none since) ends with its TTL, and new
// evidence marks it again with a doubled TTL.
func (c *Controller) ReconcilePool(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := capacity.PoolKey(req.Name)
	scoped := c.tracker.ScopedOut(key)
	out, reason, until := c.tracker.Unavailable(key)
	c.mu.Lock()
	o, known := c.outages[key]
	if !out {
		delete(c.outages, key)
	}
	c.mu.Unlock()
	wide := out && known && o.reason == reason
	if !wide && len(scoped) == 0 {
		return reconcile.Result{}, nil
	}
	var np *karpv1.NodePool
	got := &karpv1.NodePool{}
	switch err := c.kubeClient.Get(ctx, client.ObjectKey{Name: req.Name}, got); {
	case err == nil:
		np = got
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("getting NodePool %s: %w", req.Name, err)
	}
	c.liftScoped(ctx, np, scoped)
	if !wide {
		return reconcile.Result{}, nil
	}
	holds, checkable := c.stillHolds(ctx, req.Name, o, np)
	now := c.clock.Now()
	logger := log.FromContext(ctx).WithValues("nodepool", req.Name, "reason", reason)
	switch {
	case checkable && !holds:
		if c.tracker.Lift(key) {
			metrics.CapacityRechecksTotal.WithLabelValues(reason, RecheckLifted).Inc()
			logger.Info("capacity back: the evidence of the outage is gone")
			c.updateGauge()
		}
		return reconcile.Result{}, nil
	case now.Before(until.Add(-recheckLead)):
		return reconcile.Result{RequeueAfter: until.Add(-recheckLead).Sub(now)}, nil
	case checkable:
		until = c.tracker.Extend(key, reason)
		// The next check asks for evidence newer than this one.
		c.mu.Lock()
		o.marked = now
		c.outages[key] = o
		c.mu.Unlock()
		metrics.CapacityRechecksTotal.WithLabelValues(reason, RecheckStill).Inc()
		logger.Info("capacity still unavailable: the evidence still holds", "until", until.UTC().Format(time.RFC3339))
		return reconcile.Result{RequeueAfter: max(until.Add(-recheckLead).Sub(now), time.Second)}, nil
	}
	metrics.CapacityRechecksTotal.WithLabelValues(reason, RecheckExpired).Inc()
	c.mu.Lock()
	delete(c.outages, key)
	c.mu.Unlock()
	return reconcile.Result{}, nil
}

// liftScoped ends the workloads' outages of the NodePool np (nil: gone;
// its pods then fall back for every workload, not_ready) that its state
// no longer stands behind (scopedGone). A workload's outage is never kept
// longer than its TTL: its evidence was the workload's own pods, which
// the pool's state cannot show again.
func (c *Controller) liftScoped(ctx context.Context, np *karpv1.NodePool, scoped map[capacity.Key]string) {
	if np == nil {
		return
	}
	lifted := false
	for key, reason := range scoped {
		c.mu.Lock()
		o, known := c.outages[key]
		c.mu.Unlock()
		if !known || o.reason != reason || !o.scopedGone(np) || !c.tracker.Lift(key) {
			continue
		}
		c.mu.Lock()
		delete(c.outages, key)
		c.mu.Unlock()
		metrics.CapacityRechecksTotal.WithLabelValues(reason, RecheckLifted).Inc()
		log.FromContext(ctx).Info("capacity back for a workload: the NodePool changed since its outage", "nodepool", np.Name,
			"workload", key.Scope(), "reason", reason)
		lifted = true
	}
	if lifted {
		c.updateGauge()
	}
}

// scopedGone reports whether the NodePool np no longer stands behind a
// workload's outage of it. What the workload's pods showed depends on the
// pool's limits and on what its template allows:
//
//   - any reason: the template changed (requirements, labels, taints,
//     NodeClass): other instance types or offerings may serve the pods;
//   - limits (Karpenter said every instance type exceeds what is left),
//     no_nodeclaim and timeout (Karpenter launched nothing for the pods,
//     which limits explain too): a limit raised or removed, or usage lower.
//
// no_offering (no offering for the pod now, a cloud's capacity) does not
// end on more room under the limits.
func (o outage) scopedGone(np *karpv1.NodePool) bool {
	if o.template != nil && !equality.Semantic.DeepEqual(*o.template, np.Spec.Template) {
		return true
	}
	switch o.reason {
	case ReasonLimits, ReasonNoNodeClaim, ReasonTimeout:
		return o.limits.grown(np)
	}
	return false
}

// stillHolds checks an outage's evidence against the cluster's state now
// (np nil: the NodePool is gone). checkable is false for evidence that
// cannot be checked again without a pod trying (launch failures): an Event
// alone never keeps a pool out longer.
func (c *Controller) stillHolds(ctx context.Context, pool string, o outage, np *karpv1.NodePool) (holds, checkable bool) {
	switch o.reason {
	case ReasonNotReady:
		_, bad := poolState(np)
		return bad, true
	case ReasonLimits:
		if np == nil {
			return true, true
		}
		if o.limits.grown(np) {
			return false, true
		}
		// The question that marked it, asked again.
		_, holds := c.limitsHold(ctx, np)
		return holds, true
	case ReasonNoInstanceTypes:
		if np == nil {
			return true, true
		}
		return c.noTypesHold(ctx, np), true
	case ReasonLaunchFailed:
		if failed, ok := c.failure(pool); ok && failed.After(o.marked) {
			return true, true
		}
	}
	return false, false
}
