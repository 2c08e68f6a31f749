package fallback

import (
	"context"
	"fmt"
	"time"

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

// outage is the evidence a NodePool was marked out for every workload on.
type outage struct {
	reason string
	marked time.Time
	limits limitsOf // reason limits
}

// recordOutage keeps the evidence of a new cluster-wide outage and asks
// the NodePool outage controller to watch it.
func (c *Controller) recordOutage(pool string, sig signal) {
	o := outage{reason: sig.reason, marked: c.clock.Now()}
	if sig.np != nil && sig.reason == ReasonLimits {
		o.limits = snapshotLimits(sig.np)
	}
	c.mu.Lock()
	if len(c.outages) >= maxPools {
		c.outages = map[string]outage{}
	}
	c.outages[pool] = o
	c.mu.Unlock()
	ev := poolEvent{Object: &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: pool}}}
	select {
	case c.rechecks <- ev:
	default: // full: the NodePool's next update, or its pods, bring it
	}
}

// ReconcilePool follows a NodePool's cluster-wide outage: it ends it at once
// when its evidence is gone (limits raised or usage lower, room left for an
// instance type the pool allows, the pool Ready again, its requirements
// allowing an instance type), and keeps it out for another outage when the
// cluster's state still backs it at its end (the pool at its limits, not
// Ready or left no instance type by its requirements, a launch failure
// since), so that pods are not sent back to a pool that still cannot
// launch. Each is the question that marked the pool, asked again
// (limitsHold, noTypesHold, poolState). Any other outage (launch failures
// with none since) ends with its TTL, and new evidence marks it again with
// a doubled TTL.
func (c *Controller) ReconcilePool(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := capacity.PoolKey(req.Name)
	out, reason, until := c.tracker.Unavailable(key)
	c.mu.Lock()
	o, known := c.outages[req.Name]
	if !out {
		delete(c.outages, req.Name)
	}
	c.mu.Unlock()
	if !out || !known || o.reason != reason {
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
		c.outages[req.Name] = o
		c.mu.Unlock()
		metrics.CapacityRechecksTotal.WithLabelValues(reason, RecheckStill).Inc()
		logger.Info("capacity still unavailable: the evidence still holds", "until", until.UTC().Format(time.RFC3339))
		return reconcile.Result{RequeueAfter: max(until.Add(-recheckLead).Sub(now), time.Second)}, nil
	}
	metrics.CapacityRechecksTotal.WithLabelValues(reason, RecheckExpired).Inc()
	c.mu.Lock()
	delete(c.outages, req.Name)
	c.mu.Unlock()
	return reconcile.Result{}, nil
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
