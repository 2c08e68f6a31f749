package placement

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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
	// Holder is the placement Lease's holder as the informer shows it.
	Holder *LeaseHolder
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
	h, cached := l.Holder.Holder()
	if !cached {
		return false, "the placement Lease is not in the informer cache", otherHolderWait
	}
	if h != l.Identity {
		return false, "the placement Lease names another holder", otherHolderWait
	}
	return true, "", 0
}

// LeaseHolder keeps the holder of one Lease, fed by the Lease informer's
// events. A read from the cache deep-copies the Lease, twice per decision;
// this is an atomic load. The handler runs just after the informer's store
// is updated, so the holder is the cached Lease's.
type LeaseHolder struct {
	key client.ObjectKey
	// holder is the Lease's holder, "" when it names none; nil while the
	// Lease is not cached.
	holder atomic.Pointer[string]
}

// NewLeaseHolder follows the Lease named key; any other Lease's events are
// ignored.
func NewLeaseHolder(key client.ObjectKey) *LeaseHolder {
	return &LeaseHolder{key: key}
}

// Holder is the cached Lease's holder identity ("" when it names none), and
// false when the Lease is not cached.
func (h *LeaseHolder) Holder() (string, bool) {
	if p := h.holder.Load(); p != nil {
		return *p, true
	}
	return "", false
}

// OnAdd is the Lease's creation, or its first listing.
func (h *LeaseHolder) OnAdd(obj any, _ bool) { h.set(obj) }

// OnUpdate is an acquisition, a renewal or a release.
func (h *LeaseHolder) OnUpdate(_, obj any) { h.set(obj) }

// OnDelete forgets the holder: a deleted Lease names nobody.
func (h *LeaseHolder) OnDelete(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if lease, ok := obj.(*coordinationv1.Lease); ok && h.follows(lease) {
		h.holder.Store(nil)
	}
}

func (h *LeaseHolder) set(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok || !h.follows(lease) {
		return
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	// A renewal keeps the holder: nothing to store.
	if p := h.holder.Load(); p == nil || *p != holder {
		h.holder.Store(&holder)
	}
}

// follows tells the Lease named by key from any other: a Lease of the
// same name in a tenant's namespace says nothing about who leads.
func (h *LeaseHolder) follows(lease *coordinationv1.Lease) bool {
	return lease.Namespace == h.key.Namespace && lease.Name == h.key.Name
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
