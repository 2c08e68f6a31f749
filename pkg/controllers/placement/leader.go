package placement

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/lease"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

// ResultNotLeader is the result label of the decisions metric for a pod
// left gated because this replica no longer holds a fresh placement Lease:
// nothing was written, and the pod is decided by whichever replica leads.
const ResultNotLeader = "not_leader"

// Lease is how the controller knows, before each write, that this replica
// still leads. The elector only finds out it lost the Lease at its renew
// deadline: a leader frozen longer than the lease duration wakes up still
// leading by its own account, while another replica holds the Lease and
// decides. Two replicas deciding the same revision count each other's pods
// late and break the split, so a write needs both of:
//   - this replica's last successful renewal, by its own clock, within the
//     lease duration (the informer of a replica just thawed still shows the
//     Lease it held before the freeze);
//   - the cached Lease naming this replica (a renewal can look fresh while
//     the Lease was lost another way; a new leader's first decisions wait
//     for the informer to show its acquisition, a few milliseconds).
//
// Neither costs an API call, nor an allocation. A freeze between the check
// and the patch is not covered: the API server has no fencing token to
// refuse a patch by.
type Lease struct {
	// Holder is the placement Lease, with its holder, as the informer
	// shows it.
	Holder *lease.Watch
	// Identity is this replica's holder identity.
	Identity string
	// Renewed is when this replica sent its last successful renewal (or
	// acquisition) of the Lease; zero when it does not hold it.
	Renewed func() time.Time
	// Duration is the lease duration.
	Duration time.Duration
}

// When this replica does not lead, the pod is looked at again: its last
// renewal is stale only until the elector renews or steps down (within the
// renew deadline), and a new leader's cache shows its Lease within
// milliseconds.
const (
	staleRenewalWait = time.Second
	otherHolderWait  = 100 * time.Millisecond
)

// WithLease makes every write wait for this replica to hold a fresh Lease;
// without it (no leader election), the controller always decides.
func (c *Controller) WithLease(l Lease) *Controller {
	c.lease = &l
	return c
}

// leads reports whether this replica may write a decision now and, when it
// may not, why and how long to wait before the pod is looked at again.
func (c *Controller) leads() (ok bool, why string, wait time.Duration) {
	l := c.lease
	if l == nil {
		return true, "", 0
	}
	renewed := l.Renewed()
	if renewed.IsZero() {
		return false, "this replica has not renewed the placement Lease", staleRenewalWait
	}
	if age := c.clock.Since(renewed); age >= l.Duration {
		return false, fmt.Sprintf("this replica last renewed the placement Lease %s ago, longer than the lease duration (%s)", age.Round(time.Millisecond), l.Duration), staleRenewalWait
	}
	s, cached := l.Holder.Spec()
	if !cached {
		return false, "the placement Lease is not in the informer cache", otherHolderWait
	}
	if s.Holder != l.Identity {
		return false, "the placement Lease names another holder", otherHolderWait
	}
	return true, "", 0
}

// notLeading checks leads before a write. When this replica does not lead,
// it counts the pod (group and nodepool as far as they are known), logs the
// reason once until it leads again, and returns the requeue that leaves the
// pod gated for the real leader.
func (c *Controller) notLeading(ctx context.Context, group, nodePool string) (reconcile.Result, bool) {
	ok, why, wait := c.leads()
	if ok {
		if c.deposed.CompareAndSwap(true, false) {
			log.FromContext(ctx).Info("placement Lease held again; deciding pods")
		}
		return reconcile.Result{}, false
	}
	metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(group), metrics.NodePools.Value(nodePool), ResultNotLeader).Inc()
	if c.deposed.CompareAndSwap(false, true) {
		log.FromContext(ctx).Info("not deciding: this replica does not hold a fresh placement Lease; pods stay gated for the leader", "why", why)
	}
	return reconcile.Result{RequeueAfter: wait}, true
}
