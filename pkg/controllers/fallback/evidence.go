package fallback

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/jellydator/ttlcache/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
	// Karpenter writes its Events about a NodePool in one namespace only.
	case obj.Kind == "NodePool" && ev.Reason == capacity.EventNoCompatibleInstanceTypes && obj.Name != "" &&
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
	if pe.uid != "" && pe.uid != np.UID {
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

// poolUsage is what counts against a NodePool's limits now, and the
// smallest node it runs.
type poolUsage struct {
	used corev1.ResourceList
	// smallest is, per resource, the least that any launched NodeClaim of
	// the pool can give pods (its allocatable; none for one without the
	// resource), and "nodes" 1; nil when no NodeClaim of the pool has
	// launched.
	smallest corev1.ResourceList
}

// usage reads what counts against a NodePool's limits now: its status, or
// the capacity of its NodeClaims when more (Karpenter counts launching ones
// before its status shows them). Read from the API when it can: Karpenter
// writes its FailedScheduling Events just before it creates the NodeClaims
// of the same round, so the cache may not have them yet.
func (c *Controller) usage(ctx context.Context, np *karpv1.NodePool) poolUsage {
	used := np.Status.Resources.DeepCopy()
	if used == nil {
		used = corev1.ResourceList{}
	}
	u := poolUsage{used: used}
	var reader client.Reader = c.kubeClient
	if c.opts.APIReader != nil {
		reader = c.opts.APIReader
	}
	var claims karpv1.NodeClaimList
	if err := reader.List(ctx, &claims, client.MatchingLabels{karpv1.NodePoolLabelKey: np.Name}); err != nil {
		return u
	}
	sum := corev1.ResourceList{}
	for i := range claims.Items {
		nc := &claims.Items[i]
		if nc.DeletionTimestamp != nil {
			continue
		}
		capacity := nc.Status.Capacity
		if len(capacity) == 0 {
			capacity = nc.Spec.Resources.Requests
		} else if alloc := nc.Status.Allocatable; len(alloc) > 0 {
			// What a node can give pods is never more than what it
			// counts against the limits: the smaller is the safer
			// measure of its size (and some providers, such as kwok,
			// report the pods' requests as the capacity).
			u.smallest = smaller(u.smallest, alloc)
		} else {
			u.smallest = smaller(u.smallest, capacity)
		}
		for name, q := range capacity {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
		total := sum["nodes"]
		total.Add(resource.MustParse("1"))
		sum["nodes"] = total
	}
	for name, q := range sum {
		if have, ok := used[name]; !ok || q.Cmp(have) > 0 {
			used[name] = q
		}
	}
	return u
}

// smaller is the least of each resource in have (nil: none yet) and in
// what a launched NodeClaim gives; a resource one of them lacks is zero.
func smaller(have, size corev1.ResourceList) corev1.ResourceList {
	if have == nil {
		out := size.DeepCopy()
		out["nodes"] = resource.MustParse("1")
		return out
	}
	for name, q := range have {
		if name == "nodes" {
			continue
		}
		if c, ok := size[name]; !ok {
			have[name] = resource.Quantity{}
		} else if c.Cmp(q) < 0 {
			have[name] = c.DeepCopy()
		}
	}
	return have
}

// onEveryNode are resources every instance type has some of: a limit of
// theirs with nothing left leaves no instance type.
var onEveryNode = map[corev1.ResourceName]bool{"nodes": true, corev1.ResourceCPU: true, corev1.ResourceMemory: true}

// limitsBacked reports whether the NodePool's own state says it cannot
// launch another node: some limit leaves less than the smallest node it
// runs can give pods of that resource, or nothing at all of a resource
// every node has, or less than nothing. Karpenter's limits finding (every instance type
// of the pool exceeds what is left) is written on a pod, where anyone who
// may create Events in the pod's namespace can write it too; it reaches
// other workloads only when this holds. A pod that needs more than a pool
// has left says nothing about the pods that fit in it.
func limitsBacked(np *karpv1.NodePool, u poolUsage) bool {
	for name, limit := range np.Spec.Limits {
		left := limit.DeepCopy()
		if used, ok := u.used[name]; ok {
			left.Sub(used)
		}
		switch {
		case left.Sign() < 0, left.Sign() == 0 && onEveryNode[name]:
			return true
		case u.smallest != nil:
			if least := u.smallest[name]; left.Cmp(least) < 0 {
				return true
			}
		}
	}
	return false
}

// headroom describes what is left of each of the NodePool's limits given
// used, and what the pod asks for of it: "cpu 100m of 3 left (the pod needs
// 900m)". requests may be nil (not known).
func headroom(np *karpv1.NodePool, used, requests corev1.ResourceList) string {
	names := make([]string, 0, len(np.Spec.Limits))
	for name := range np.Spec.Limits {
		names = append(names, string(name))
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		name := corev1.ResourceName(n)
		limit := np.Spec.Limits[name]
		left := limit.DeepCopy()
		if u, ok := used[name]; ok {
			left.Sub(u)
		}
		if left.Sign() < 0 {
			left = resource.Quantity{}
		}
		part := fmt.Sprintf("%s %s of %s left", name, left.String(), limit.String())
		if need, ok := requests[name]; ok && !need.IsZero() {
			part += fmt.Sprintf(" (the pod needs %s)", need.String())
		} else if name == "nodes" {
			part += " (the pod needs a new node)"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// podRequests is what the pod asks of a node: the sum of its containers'
// requests, or its largest init container's if larger, plus its overhead.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, ctr := range pod.Spec.Containers {
		for name, q := range ctr.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	for _, ctr := range pod.Spec.InitContainers {
		for name, q := range ctr.Resources.Requests {
			if have := out[name]; q.Cmp(have) > 0 {
				out[name] = q.DeepCopy()
			}
		}
	}
	for name, q := range pod.Spec.Overhead {
		sum := out[name]
		sum.Add(q)
		out[name] = sum
	}
	return out
}

// limitsOf is a copy of a NodePool's limits and usage, kept with an outage
// so that its end can be checked against them.
type limitsOf struct {
	limits, used corev1.ResourceList
}

func snapshotLimits(np *karpv1.NodePool) limitsOf {
	return limitsOf{limits: corev1.ResourceList(np.Spec.Limits).DeepCopy(), used: np.Status.Resources.DeepCopy()}
}

// grown reports whether some limited resource has more room now than in
// the snapshot: its limit raised or removed, or its usage lower.
func (l limitsOf) grown(np *karpv1.NodePool) bool {
	for name, was := range l.limits {
		now, ok := np.Spec.Limits[name]
		if !ok || now.Cmp(was) > 0 {
			return true
		}
		if used, had := l.used[name]; had {
			if cur := np.Status.Resources[name]; cur.Cmp(used) < 0 {
				return true
			}
		}
	}
	return false
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
