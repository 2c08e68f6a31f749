package fallback

import (
	"context"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/jellydator/ttlcache/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
)

// What Karpenter said about one pod: its latest FailedScheduling and
// Nominated Events (Karpenter sends each at most every few minutes per pod).
type podEvents struct {
	failedAt    time.Time
	failed      string // the FailedScheduling message
	nominatedAt time.Time
}

// podRef names the pod an Event is about within its namespace's evidence:
// its name and UID both, so that an Event naming another pod's UID says
// nothing about that pod.
type podRef struct {
	name string
	uid  types.UID
}

// Bounds of the pod evidence. Each namespace has its own cache, so that one
// namespace's Events (tenant input) never push out another's.
const (
	podEvidenceTTL        = 30 * time.Minute
	maxPodsPerNamespace   = 10_000
	maxEvidenceNamespaces = 10_000
)

// poolEvents is Karpenter's latest NoCompatibleInstanceTypes on a NodePool,
// with the NodePool's UID it named.
type poolEvents struct {
	at  time.Time
	uid types.UID
}

// PoolEventNamespace is where Karpenter's Events about a NodePool are: a
// NodePool has no namespace, and client-go's recorder, which Karpenter
// uses, writes the Event of an object without one in "default". An Event
// about a NodePool anywhere else was written by someone else.
const PoolEventNamespace = metav1.NamespaceDefault

// eventTime is when an Event last happened.
func eventTime(ev *corev1.Event) time.Time {
	t := ev.CreationTimestamp.Time
	for _, u := range []time.Time{ev.FirstTimestamp.Time, ev.LastTimestamp.Time, ev.EventTime.Time} {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// fromKarpenter: an Event that says Karpenter's provisioner wrote it. Any
// identity that may create Events can say so: what it says is a hint that
// the cluster's own state must back before it reaches other workloads.
func fromKarpenter(ev *corev1.Event) bool {
	return ev.Source.Component == capacity.KarpenterComponent || ev.ReportingController == capacity.KarpenterComponent
}

// ObserveEvent records what a Karpenter Event says; it returns the pod to
// evaluate again, or the NodePool whose pods to evaluate again (one of them
// empty, both when nothing changed).
func (c *Controller) ObserveEvent(ev *corev1.Event) (pod types.NamespacedName, pool string) {
	if ev == nil || !fromKarpenter(ev) {
		return pod, ""
	}
	obj := ev.InvolvedObject
	switch {
	// An Event about a pod lives in the pod's namespace: one written in
	// another namespace is not Karpenter's. It is kept under the pod's
	// name and UID in that namespace's own cache.
	case obj.Kind == "Pod" && obj.UID != "" && obj.Name != "" && obj.Namespace == ev.Namespace && (ev.Reason == capacity.EventFailedScheduling || ev.Reason == capacity.EventNominated):
		if c.observePodEvent(ev) {
			return types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}, ""
		}
	// Karpenter writes its Events about a NodePool in one namespace only,
	// naming the NodePool's UID. What one says is a hint still: it marks
	// the pool only when its state agrees (noTypesHold).
	case obj.Kind == "NodePool" && ev.Reason == capacity.EventNoCompatibleInstanceTypes && obj.Name != "" && obj.UID != "" &&
		ev.Namespace == PoolEventNamespace && obj.Namespace == "":
		if c.observePoolEvent(ev) {
			return pod, obj.Name
		}
	}
	return pod, ""
}

// observePodEvent keeps a FailedScheduling or Nominated Event about a pod; it
// reports whether it says something new.
func (c *Controller) observePodEvent(ev *corev1.Event) bool {
	at, obj := eventTime(ev), ev.InvolvedObject
	c.mu.Lock()
	defer c.mu.Unlock()
	cache := c.podCache(obj.Namespace)
	ref := podRef{name: obj.Name, uid: obj.UID}
	pe := podEvents{}
	if item := cache.Get(ref); item != nil {
		pe = item.Value()
	}
	switch ev.Reason {
	case capacity.EventFailedScheduling:
		if !at.After(pe.failedAt) && pe.failed == ev.Message {
			return false
		}
		pe.failedAt, pe.failed = at, ev.Message
	case capacity.EventNominated:
		if !at.After(pe.nominatedAt) {
			return false
		}
		pe.nominatedAt = at
	}
	cache.Set(ref, pe, ttlcache.DefaultTTL)
	return true
}

// observePoolEvent keeps a NoCompatibleInstanceTypes Event about a NodePool;
// it reports whether it is newer than the last one.
func (c *Controller) observePoolEvent(ev *corev1.Event) bool {
	at, obj := eventTime(ev), ev.InvolvedObject
	c.mu.Lock()
	defer c.mu.Unlock()
	if !at.After(c.noTypes[obj.Name].at) {
		return false
	}
	if len(c.noTypes) >= maxPools {
		c.noTypes = map[string]poolEvents{}
	}
	c.noTypes[obj.Name] = poolEvents{at: at, uid: obj.UID}
	return true
}

// maxPools bounds the NodePools whose Events are kept.
const maxPools = 4096

// podCache is namespace's pod evidence, made on first use (c.mu held). When
// there are too many namespaces, the ones left with nothing are dropped.
func (c *Controller) podCache(namespace string) *ttlcache.Cache[podRef, podEvents] {
	if cache, ok := c.pods[namespace]; ok {
		return cache
	}
	if len(c.pods) >= maxEvidenceNamespaces {
		for ns, cache := range c.pods {
			if cache.DeleteExpired(); cache.Len() == 0 {
				delete(c.pods, ns)
			}
		}
	}
	cache := ttlcache.New(ttlcache.WithTTL[podRef, podEvents](podEvidenceTTL),
		ttlcache.WithCapacity[podRef, podEvents](maxPodsPerNamespace))
	c.pods[namespace] = cache
	return cache
}

// podEventsOf is what Karpenter said about this pod: the Events in its
// namespace that name it and its UID.
func (c *Controller) podEventsOf(pod *corev1.Pod) podEvents {
	c.mu.Lock()
	defer c.mu.Unlock()
	cache, ok := c.pods[pod.Namespace]
	if !ok {
		return podEvents{}
	}
	if item := cache.Get(podRef{name: pod.Name, uid: pod.UID}); item != nil {
		return item.Value()
	}
	return podEvents{}
}

// noTypesAt is when Karpenter last said the NodePool np (this one, by its
// UID) has no instance type left.
func (c *Controller) noTypesAt(np *karpv1.NodePool) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	pe := c.noTypes[np.Name]
	if pe.uid != np.UID {
		return time.Time{}
	}
	return pe.at
}

// poolState reports a NodePool that cannot launch nodes: gone, being
// deleted, or not Ready.
func poolState(np *karpv1.NodePool) (signal, bool) {
	if np == nil {
		return signal{reason: ReasonNotReady, wide: true, detail: "the NodePool does not exist"}, true
	}
	if np.DeletionTimestamp != nil {
		return signal{reason: ReasonNotReady, wide: true, detail: "the NodePool is being deleted"}, true
	}
	// Observed only: the cached object is read, never initialised.
	if ready := np.StatusConditions(status.WithObservedOnly()).Root(); ready.IsFalse() {
		return signal{reason: ReasonNotReady, wide: true, detail: fmt.Sprintf("the NodePool is not Ready (%s: %s)", ready.Reason, ready.Message)}, true
	}
	return signal{}, false
}

// onTheWay returns until when some NodeClaim of pool counts as on its way
// for a pod with this timeout (its creation plus timeout, the latest one),
// or zero if none, and when the newest of them was created.
func (c *Controller) onTheWay(ctx context.Context, pool string, timeout time.Duration, now time.Time) (until, newest time.Time, err error) {
	var claims karpv1.NodeClaimList
	if err := c.kubeClient.List(ctx, &claims, client.MatchingFields{ClaimOnTheWayIndex: pool}, client.UnsafeDisableDeepCopy); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("listing NodeClaims of %s: %w", pool, err)
	}
	for i := range claims.Items {
		created := claims.Items[i].CreationTimestamp.Time
		if u := created.Add(timeout); u.After(now) && u.After(until) {
			until = u
		}
		if created.After(newest) {
			newest = created
		}
	}
	return until, newest, nil
}

// claimIndex indexes a NodeClaim under its NodePool while it may still
// become a node that takes pods: until it is initialised (a registered node
// is not ready for pods yet).
func claimIndex(o client.Object) []string {
	nc, ok := o.(*karpv1.NodeClaim)
	if !ok {
		return nil
	}
	pool := nc.Labels[karpv1.NodePoolLabelKey]
	if pool == "" || nc.DeletionTimestamp != nil || initialized(nc) {
		return nil
	}
	if failed, _ := launchFailed(nc); failed {
		return nil
	}
	return []string{pool}
}

func initialized(nc *karpv1.NodeClaim) bool {
	return nc.StatusConditions(status.WithObservedOnly()).Get(karpv1.ConditionTypeInitialized).IsTrue()
}

func registered(nc *karpv1.NodeClaim) bool {
	return nc.StatusConditions(status.WithObservedOnly()).Get(karpv1.ConditionTypeRegistered).IsTrue()
}

// awaitingReason is the reason operatorpkg gives a condition it initialises
// to Unknown; Karpenter's launch sets Launched Unknown with another reason
// (its error's) when the cloud provider fails to create the instance.
var awaitingReason = (&karpv1.NodeClaim{}).StatusConditions().Get(karpv1.ConditionTypeLaunched).Reason

// launchFailed reports whether the NodeClaim will not become a node, and
// since when: deleted before it registered (Karpenter deletes the NodeClaim
// on insufficient capacity, and after its launch or registration timeout),
// or Launched False, or Launched Unknown with a launch error's reason.
func launchFailed(nc *karpv1.NodeClaim) (bool, time.Time) {
	if registered(nc) {
		return false, time.Time{}
	}
	if nc.DeletionTimestamp != nil {
		return true, nc.DeletionTimestamp.Time
	}
	launched := nc.StatusConditions(status.WithObservedOnly()).Get(karpv1.ConditionTypeLaunched)
	if launched.IsFalse() || (launched != nil && launched.IsUnknown() && launched.Reason != "" && launched.Reason != awaitingReason) {
		return true, launched.LastTransitionTime.Time
	}
	return false, time.Time{}
}

// observeClaim records the launch failure of a NodeClaim once; it reports
// whether it was new. deleted: the delete event (the object is its last
// state).
func (c *Controller) observeClaim(nc *karpv1.NodeClaim, deleted bool) bool {
	pool := nc.Labels[karpv1.NodePoolLabelKey]
	if pool == "" {
		return false
	}
	failed, at := launchFailed(nc)
	if deleted && !registered(nc) {
		failed = true
		if at.IsZero() {
			at = c.clock.Now()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.failedClaims[nc.UID]; seen {
		if deleted {
			delete(c.failedClaims, nc.UID)
		}
		return false
	}
	if !failed {
		return false
	}
	if now := c.clock.Now(); at.IsZero() || at.After(now) {
		at = now
	}
	if !deleted {
		c.failedClaims[nc.UID] = struct{}{}
	}
	if at.After(c.failures[pool]) {
		if len(c.failures) >= maxPools {
			c.failures = map[string]time.Time{}
		}
		c.failures[pool] = at
	}
	return true
}

func (c *Controller) failure(pool string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.failures[pool]
	return t, ok
}
