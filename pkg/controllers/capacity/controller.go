// Package capacity is the capacity detector: it runs on the elected leader,
// watches the pods apportion decided that the scheduler cannot place, and
// marks their NodePool (Karpenter mode) or their group's label set
// (node-label mode) out of capacity in a capacity.Tracker when Karpenter
// cannot give them a node. It then deletes the stuck pods of that key that a
// ReplicaSet or StatefulSet will recreate, so that placement puts the new
// pods in the groups that have capacity.
//
// The signals, for a decided pod that is unbound, Pending and unschedulable
// (PodScheduled False, reason Unschedulable) since T:
//
//  1. its NodePool is not Ready, or is gone (not_ready);
//  2. its NodePool is at its limits (limits);
//  3. a NodeClaim of its NodePool failed to launch (deleted before it
//     registered, as Karpenter does on insufficient capacity, or its
//     Launched condition records an error) in the last timeout, at least
//     Grace ago, and no NodeClaim of the pool is on its way (launch_failed);
//  4. it stayed unschedulable for its timeout (--capacity-timeout or the
//     workload's apportion.dev/capacity-timeout) and no NodeClaim of the
//     pool is on its way (timeout).
//
// Signals 1 and 2 wait until the pod has been unschedulable for Grace, so
// that Karpenter had a batch window. A NodeClaim is "on its way" while it is
// not registered, not being deleted, its launch has not failed, and it was
// created less than the pod's timeout ago: a slow boot is not a failure. In
// node-label mode only signal 4 applies, without the NodeClaim check.
//
// For example, with a 3m timeout: pod p of NodePool spot becomes
// unschedulable at 0:00; Karpenter creates NodeClaim c at 0:00:05, whose
// launch fails on insufficient capacity and which it deletes at 0:00:08. At
// 0:00:18 (Grace after the failure) no other NodeClaim of spot is on its
// way: spot is out until 0:03:18, a Warning Event CapacityUnavailable goes
// to p's Deployment, and p and the other pending pods of spot are deleted.
// Had Karpenter created NodeClaim d at 0:00:12 instead, nothing would happen
// until d registers, fails, or turns 3m old.
//
// Evidence older than the end of the key's last outage is not counted again:
// after an outage, a stuck pod's unschedulable time and the launch failures
// start from when the key came back.
package capacity

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/jellydator/ttlcache/v3"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Reasons a key is out (metric label values, and the Tracker's reason).
const (
	ReasonNotReady     = "not_ready"
	ReasonLimits       = "limits"
	ReasonLaunchFailed = "launch_failed"
	ReasonTimeout      = "timeout"
)

// Grace is how long a pod must have been unschedulable before its
// NodePool's state counts against it, and how long after a launch failure
// Karpenter may take to create another NodeClaim: Karpenter batches pending
// pods for up to 10 seconds before it provisions.
const Grace = 10 * time.Second

// Defaults of Options.
const (
	DefaultTimeout   = 3 * time.Minute
	DefaultDeleteQPS = 2
	DeleteBurst      = 5
)

// Index names on the manager's caches, added by Register.
const (
	// PodKeyIndex: the capacity.Key a decided, unbound pod was placed in.
	PodKeyIndex = "apportion.capacityKey"
	// ClaimOnTheWayIndex: the NodePool of a NodeClaim that may still
	// become a node (not registered, not being deleted, launch not failed).
	ClaimOnTheWayIndex = "apportion.nodeClaimOnTheWay"
)

// Options configure the detector.
type Options struct {
	// Timeout is how long a decided pod may stay unschedulable while no
	// NodeClaim of its pool is on its way (--capacity-timeout).
	Timeout time.Duration
	// DeleteQPS is the rate of pod deletions (burst DeleteBurst); 0
	// deletes none (keys are still marked, for placement to pass over).
	DeleteQPS float64
	// NodeLabels is node-label mode (no NodePool API): keys are
	// capacity.LabelsKey(group) and only the timeout signal applies.
	NodeLabels bool
	// ScaleFromZero (node-label mode): a group with no node now is not a
	// reason by itself. The detector marks groups on the timeout alone, so
	// this changes nothing here.
	ScaleFromZero bool
}

// Limiter paces the deletions; *rate.Limiter is one.
type Limiter interface {
	Wait(ctx context.Context) error
}

// Controller detects keys out of capacity and deletes their stuck pods.
type Controller struct {
	kubeClient client.Client
	clock      clock.Clock
	recorder   events.EventRecorder
	tracker    *capacity.Tracker
	opts       Options
	limiter    Limiter
	deletions  *podQueue

	mu           sync.Mutex
	failures     map[string]time.Time   // NodePool -> its latest launch failure
	failedClaims map[types.UID]struct{} // NodeClaims whose failure is recorded
	warned       *ttlcache.Cache[string, struct{}]
}

// NewController builds the detector. A zero Timeout takes the default.
func NewController(clk clock.Clock, kubeClient client.Client, recorder events.EventRecorder, tracker *capacity.Tracker, opts Options) *Controller {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	opts.DeleteQPS = max(opts.DeleteQPS, 0)
	return &Controller{
		kubeClient: kubeClient, clock: clk, recorder: recorder, tracker: tracker, opts: opts,
		limiter:      rate.NewLimiter(rate.Limit(opts.DeleteQPS), DeleteBurst),
		deletions:    newPodQueue(),
		failures:     map[string]time.Time{},
		failedClaims: map[types.UID]struct{}{},
		warned:       ttlcache.New(ttlcache.WithTTL[string, struct{}](time.Hour), ttlcache.WithCapacity[string, struct{}](4096)),
	}
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "capacity" }

// Register adds the indexes, the pod controller (with the NodePool and
// NodeClaim watches in Karpenter mode), the deleter and the gauge updater to
// the manager; all run on the elected leader only.
func (c *Controller) Register(ctx context.Context, m manager.Manager) error {
	if err := m.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, PodKeyIndex, c.podIndex); err != nil {
		return fmt.Errorf("indexing pods by capacity key: %w", err)
	}
	if err := m.Add(manager.RunnableFunc(c.runDeleter)); err != nil {
		return err
	}
	if err := m.Add(manager.RunnableFunc(c.runGauge)); err != nil {
		return err
	}
	b := controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			pod, ok := o.(*corev1.Pod)
			return ok && watched(pod)
		}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2})
	if !c.opts.NodeLabels {
		if err := m.GetFieldIndexer().IndexField(ctx, &karpv1.NodeClaim{}, ClaimOnTheWayIndex, claimIndex); err != nil {
			return fmt.Errorf("indexing NodeClaims: %w", err)
		}
		b = b.Watches(&karpv1.NodePool{}, c.nodePoolHandler()).
			Watches(&karpv1.NodeClaim{}, c.nodeClaimHandler())
	}
	return b.Complete(reconcile.AsReconciler(m.GetClient(), c))
}

// watched: the pods the controller reconciles (decided, unbound, alive).
func watched(pod *corev1.Pod) bool {
	_, decided := pod.Annotations[annotations.Group]
	return decided && pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil
}

// keyOf is the key a pod is stuck in: decided (gate removed), unbound,
// Pending, not being deleted; in Karpenter mode, placed in a NodePool.
func (c *Controller) keyOf(pod *corev1.Pod) (capacity.Key, bool) {
	if !watched(pod) || pod.Status.Phase != corev1.PodPending || decision.HasGate(pod) {
		return "", false
	}
	if c.opts.NodeLabels {
		return capacity.LabelsKey(pod.Annotations[annotations.Group]), true
	}
	pool := pod.Annotations[annotations.NodePool]
	if pool == "" {
		return "", false
	}
	return capacity.PoolKey(pool), true
}

func (c *Controller) podIndex(o client.Object) []string {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	if key, ok := c.keyOf(pod); ok {
		return []string{string(key)}
	}
	return nil
}

// Reconcile evaluates one pod: marks its key when a signal fires, queues
// the pod's deletion while its key is out, and otherwise comes back when a
// signal could fire.
func (c *Controller) Reconcile(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	key, ok := c.keyOf(pod)
	if !ok {
		return reconcile.Result{}, nil
	}
	out, _, lastBack := c.tracker.Unavailable(key)
	if out {
		// A pod left (not recreated, or a NodeClaim on its way) is looked
		// at again when the outage ends.
		c.queueDeletion(pod)
		return reconcile.Result{RequeueAfter: max(lastBack.Sub(c.clock.Now()), time.Second)}, nil
	}
	since, ok := unschedulableSince(pod)
	if !ok {
		return reconcile.Result{}, nil // the pod's next status update brings it back
	}
	if lastBack.After(since) {
		since = lastBack
	}
	info, ref := c.resolve(ctx, pod)
	timeout := c.timeoutFor(pod, info, ref)
	now := c.clock.Now()
	sig, err := c.evaluate(ctx, key, since, lastBack, timeout, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if sig.reason == "" {
		if sig.wake.IsZero() {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{RequeueAfter: max(sig.wake.Sub(now), time.Second)}, nil
	}
	until, newly := c.tracker.Mark(key, sig.reason)
	if newly {
		c.report(ctx, key, sig, until, ref)
		c.queueKey(ctx, key)
	}
	c.queueDeletion(pod)
	return reconcile.Result{RequeueAfter: max(until.Sub(now), time.Second)}, nil
}

// queueDeletion queues the pod for the deleter if its controller recreates
// it and deletions are on.
func (c *Controller) queueDeletion(pod *corev1.Pod) {
	if c.opts.DeleteQPS > 0 && recreated(pod) {
		c.deletions.add(client.ObjectKeyFromObject(pod))
	}
}

// signal is the outcome of an evaluation: a reason to mark the key (with a
// description for the Event), or when to look again (zero: on events only).
type signal struct {
	reason string
	detail string
	wake   time.Time
}

// evaluate looks for a signal against key for a pod unschedulable since
// since (not before lastBack, the end of the key's last outage).
func (c *Controller) evaluate(ctx context.Context, key capacity.Key, since, lastBack time.Time, timeout time.Duration, now time.Time) (signal, error) {
	waited := now.Sub(since)
	if c.opts.NodeLabels {
		if waited >= timeout {
			return signal{reason: ReasonTimeout, detail: fmt.Sprintf("a pod stayed unschedulable for %s", timeout)}, nil
		}
		return signal{wake: since.Add(timeout)}, nil
	}
	if waited < Grace {
		return signal{wake: since.Add(Grace)}, nil
	}
	pool := key.Name()
	// First: is Karpenter launching a node for the pool? Then wait for it
	// to be initialised, fail, or outlast the timeout (NodeClaim events
	// come sooner), whatever the pool's state: Karpenter counts launching
	// NodeClaims in status.resources and launches right up to the limits,
	// so a pool at its limits may be exactly one whose pods are about to
	// get their nodes.
	claimUntil, err := c.onTheWay(ctx, pool, timeout, now)
	if err != nil {
		return signal{}, err
	}
	if claimUntil.After(now) {
		return signal{wake: claimUntil}, nil
	}
	np := &karpv1.NodePool{}
	if err := c.kubeClient.Get(ctx, client.ObjectKey{Name: pool}, np); err != nil {
		if apierrors.IsNotFound(err) {
			return signal{reason: ReasonNotReady, detail: "the NodePool does not exist"}, nil
		}
		return signal{}, fmt.Errorf("getting NodePool %s: %w", pool, err)
	}
	if sig, bad := poolState(np); bad {
		return sig, nil
	}
	wake := since.Add(timeout)
	if failed, ok := c.failure(pool); ok && failed.After(lastBack) && now.Sub(failed) < timeout {
		if settled := failed.Add(Grace); now.Before(settled) {
			wake = earliest(wake, settled)
		} else {
			return signal{reason: ReasonLaunchFailed, detail: fmt.Sprintf("a NodeClaim of the NodePool failed to launch %s ago and none is on its way", now.Sub(failed).Round(time.Second))}, nil
		}
	}
	if waited >= timeout {
		return signal{reason: ReasonTimeout, detail: fmt.Sprintf("a pod stayed unschedulable for %s with no NodeClaim on its way", timeout)}, nil
	}
	return signal{wake: wake}, nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// poolState reports a NodePool that cannot launch nodes: not Ready, being
// deleted, or at its limits.
func poolState(np *karpv1.NodePool) (signal, bool) {
	if np.DeletionTimestamp != nil {
		return signal{reason: ReasonNotReady, detail: "the NodePool is being deleted"}, true
	}
	// Observed only: the cached object is read, never initialised.
	if ready := np.StatusConditions(status.WithObservedOnly()).Root(); ready.IsFalse() {
		return signal{reason: ReasonNotReady, detail: fmt.Sprintf("the NodePool is not Ready (%s: %s)", ready.Reason, ready.Message)}, true
	}
	if res, used, limit, at := atLimit(np); at {
		return signal{reason: ReasonLimits, detail: fmt.Sprintf("the NodePool is at its limits (%s %s of %s)", res, used.String(), limit.String())}, true
	}
	return signal{}, false
}

// everyNode are the resources every node adds to a NodePool's usage: reaching
// the limit of one of them stops every launch. Other resources (GPUs) stop
// launches only of the nodes that have them, so only exceeding their limit
// counts, as in Karpenter's Limits.ExceededBy.
var everyNode = map[corev1.ResourceName]bool{
	corev1.ResourceCPU: true, corev1.ResourceMemory: true, corev1.ResourcePods: true, corev1.ResourceEphemeralStorage: true, "nodes": true,
}

func atLimit(np *karpv1.NodePool) (res corev1.ResourceName, used, limit resource.Quantity, at bool) {
	for name, l := range np.Spec.Limits {
		u, ok := np.Status.Resources[name]
		if !ok {
			continue
		}
		if cmp := u.Cmp(l); cmp > 0 || (cmp == 0 && everyNode[name]) {
			return name, u, l, true
		}
	}
	return "", resource.Quantity{}, resource.Quantity{}, false
}

// onTheWay returns until when some NodeClaim of pool counts as on its way
// for a pod with this timeout (its creation plus timeout, the latest one),
// or zero if none.
func (c *Controller) onTheWay(ctx context.Context, pool string, timeout time.Duration, now time.Time) (time.Time, error) {
	var claims karpv1.NodeClaimList
	if err := c.kubeClient.List(ctx, &claims, client.MatchingFields{ClaimOnTheWayIndex: pool}, client.UnsafeDisableDeepCopy); err != nil {
		return time.Time{}, fmt.Errorf("listing NodeClaims of %s: %w", pool, err)
	}
	var until time.Time
	for i := range claims.Items {
		if u := claims.Items[i].CreationTimestamp.Add(timeout); u.After(now) && u.After(until) {
			until = u
		}
	}
	return until, nil
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

// unschedulableSince is when the scheduler found no node for the pod.
func unschedulableSince(pod *corev1.Pod) (time.Time, bool) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			if cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return cond.LastTransitionTime.Time, true
			}
			return time.Time{}, false
		}
	}
	return time.Time{}, false
}

// resolve finds the pod's workload for its timeout annotation and Events;
// without one (bare pod, owner not cached), the pod stands for it.
func (c *Controller) resolve(ctx context.Context, pod *corev1.Pod) (*workload.Info, *corev1.ObjectReference) {
	info, err := workload.Resolve(ctx, c.kubeClient, pod.Namespace, pod)
	if err != nil && !errors.Is(err, workload.ErrNotCached) {
		log.FromContext(ctx).V(1).Info("resolving the workload", "error", err.Error())
	}
	if err != nil || info == nil {
		return nil, &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	}
	return info, &corev1.ObjectReference{Kind: info.Workload.Kind, Namespace: info.Workload.Namespace, Name: info.Workload.Name, UID: info.Workload.UID}
}

// timeoutFor is the workload's apportion.dev/capacity-timeout (or the pod's,
// when its workload is unknown), else the default; an invalid value gives a
// Warning Event once an hour per workload and value.
func (c *Controller) timeoutFor(pod *corev1.Pod, info *workload.Info, ref *corev1.ObjectReference) time.Duration {
	raw := pod.Annotations[annotations.CapacityTimeout]
	if info != nil {
		raw = info.CapacityTimeout
	}
	if raw == "" {
		return c.opts.Timeout
	}
	d, err := time.ParseDuration(strings.TrimSpace(raw))
	if err == nil && d > 0 {
		return d
	}
	key := string(ref.UID) + "/" + raw
	if !c.warned.Has(key) {
		c.warned.Set(key, struct{}{}, ttlcache.DefaultTTL)
		c.recorder.Eventf(ref, nil, corev1.EventTypeWarning, "InvalidCapacityTimeout", "Detect",
			"%s %q is not a positive duration (such as 5m); using %s", annotations.CapacityTimeout, raw, c.opts.Timeout)
	}
	return c.opts.Timeout
}

// report emits what a new outage gives: a Warning Event on the workload of
// the pod that showed it, the metric, one log line.
func (c *Controller) report(ctx context.Context, key capacity.Key, sig signal, until time.Time, ref *corev1.ObjectReference) {
	what := "NodePool " + key.Name()
	if key.Kind() == capacity.KindLabels {
		what = "node labels " + key.Name()
	}
	c.recorder.Eventf(ref, nil, corev1.EventTypeWarning, "CapacityUnavailable", "Detect",
		"%s cannot get capacity (%s: %s); its pending pods are recreated and pods go to the other groups until %s",
		what, sig.reason, sig.detail, until.UTC().Format(time.RFC3339))
	metrics.CapacityUnavailableTotal.WithLabelValues(key.Kind(), sig.reason).Inc()
	c.updateGauge()
	log.FromContext(ctx).Info("capacity unavailable", "key", string(key), "reason", sig.reason, "detail", sig.detail,
		"until", until.UTC().Format(time.RFC3339), "workload", ref.Kind+" "+ref.Namespace+"/"+ref.Name)
}

// queueKey queues every pending pod of key for deletion (the deleter checks
// each one).
func (c *Controller) queueKey(ctx context.Context, key capacity.Key) {
	if c.opts.DeleteQPS <= 0 {
		return
	}
	var pods corev1.PodList
	if err := c.kubeClient.List(ctx, &pods, client.MatchingFields{PodKeyIndex: string(key)}, client.UnsafeDisableDeepCopy); err != nil {
		// Each pod's own reconcile queues it while the key is out.
		log.FromContext(ctx).Error(err, "listing the pods of a key out of capacity", "key", string(key))
		return
	}
	for i := range pods.Items {
		c.queueDeletion(&pods.Items[i])
	}
}

// enqueuePool asks for the evaluation of every pending pod of a NodePool.
func (c *Controller) enqueuePool(ctx context.Context, pool string, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if pool == "" {
		return
	}
	var pods corev1.PodList
	if err := c.kubeClient.List(ctx, &pods, client.MatchingFields{PodKeyIndex: string(capacity.PoolKey(pool))}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing the pending pods of a NodePool", "nodepool", pool)
		return
	}
	for i := range pods.Items {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pods.Items[i])})
	}
}

func (c *Controller) nodePoolHandler() handler.EventHandler {
	bad := func(o client.Object) bool {
		np, ok := o.(*karpv1.NodePool)
		if !ok {
			return false
		}
		_, b := poolState(np)
		return b
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if bad(e.Object) {
				c.enqueuePool(ctx, e.Object.GetName(), q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if bad(e.ObjectNew) && !bad(e.ObjectOld) {
				c.enqueuePool(ctx, e.ObjectNew.GetName(), q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			c.enqueuePool(ctx, e.Object.GetName(), q)
		},
	}
}

func (c *Controller) nodeClaimHandler() handler.EventHandler {
	pool := func(o client.Object) string { return o.GetLabels()[karpv1.NodePoolLabelKey] }
	onTheWay := func(o client.Object) bool { return len(claimIndex(o)) > 0 }
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if nc, ok := e.Object.(*karpv1.NodeClaim); ok && c.observeClaim(nc, false) {
				c.enqueuePool(ctx, pool(nc), q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			nc, ok := e.ObjectNew.(*karpv1.NodeClaim)
			if !ok {
				return
			}
			// A new failure, or a NodeClaim no longer on its way (it
			// registered, or is going away): the pods may now be stuck.
			if c.observeClaim(nc, false) || (onTheWay(e.ObjectOld) && !onTheWay(nc)) {
				c.enqueuePool(ctx, pool(nc), q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if nc, ok := e.Object.(*karpv1.NodeClaim); ok {
				c.observeClaim(nc, true)
				c.enqueuePool(ctx, pool(nc), q)
			}
		},
	}
}

// runDeleter deletes the queued pods, at most DeleteQPS a second, until ctx
// ends.
func (c *Controller) runDeleter(ctx context.Context) error {
	for {
		key, ok := c.deletions.pop(ctx)
		if !ok {
			return nil
		}
		c.deleteIfStuck(ctx, key)
	}
}

// deleteIfStuck deletes the pod if it is still a stuck pod of a key out of
// capacity that its controller will recreate: it is checked before waiting
// for the rate limiter (a pod that got bound costs no token) and again after.
func (c *Controller) deleteIfStuck(ctx context.Context, name types.NamespacedName) {
	if c.opts.DeleteQPS <= 0 || c.stuck(ctx, name) == nil {
		return
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return // shutting down
	}
	pod := c.stuck(ctx, name)
	if pod == nil {
		return
	}
	key, _ := c.keyOf(pod)
	// The preconditions make the API refuse the deletion if the pod
	// changed since the cache saw it (bound meanwhile, or replaced).
	err := c.kubeClient.Delete(ctx, pod, client.Preconditions{UID: &pod.UID, ResourceVersion: &pod.ResourceVersion})
	switch {
	case err == nil:
		metrics.CapacityPodsDeletedTotal.Inc()
		log.FromContext(ctx).Info("deleted pod stuck on a key out of capacity, for its controller to recreate elsewhere",
			"namespace", pod.Namespace, "name", pod.Name, "key", string(key))
	case apierrors.IsNotFound(err):
	case apierrors.IsConflict(err):
		// Changed: its update event brings it back to Reconcile.
		log.FromContext(ctx).V(1).Info("pod changed before its deletion", "namespace", pod.Namespace, "name", pod.Name)
	default:
		log.FromContext(ctx).Error(err, "deleting a pod stuck on a key out of capacity", "namespace", pod.Namespace, "name", pod.Name, "key", string(key))
	}
}

// stuck returns the cached pod if it may be deleted now: pending in a key
// that is out, owned by a ReplicaSet or StatefulSet (which recreate it), and
// no NodeClaim of its NodePool on its way.
func (c *Controller) stuck(ctx context.Context, name types.NamespacedName) *corev1.Pod {
	pod := &corev1.Pod{}
	if err := c.kubeClient.Get(ctx, name, pod); err != nil {
		return nil
	}
	key, ok := c.keyOf(pod)
	if !ok || !recreated(pod) {
		return nil
	}
	if out, _, _ := c.tracker.Unavailable(key); !out {
		return nil
	}
	if key.Kind() == capacity.KindNodePool {
		info, ref := c.resolve(ctx, pod)
		now := c.clock.Now()
		until, err := c.onTheWay(ctx, key.Name(), c.timeoutFor(pod, info, ref), now)
		if err != nil || until.After(now) {
			return nil
		}
	}
	return pod
}

// recreated: a ReplicaSet or StatefulSet controls the pod and will replace
// it. Bare pods, DaemonSet pods and other controllers' are never deleted.
func recreated(pod *corev1.Pod) bool {
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil || !strings.HasPrefix(owner.APIVersion, "apps/") {
		return false
	}
	return owner.Kind == workload.ReplicaSetGVK.Kind || owner.Kind == workload.StatefulSetGVK.Kind
}

// runGauge keeps apportion_capacity_unavailable current as outages end.
func (c *Controller) runGauge(ctx context.Context) error {
	for {
		c.updateGauge()
		select {
		case <-ctx.Done():
			return nil
		case <-c.clock.After(10 * time.Second):
		}
	}
}

func (c *Controller) updateGauge() {
	counts := map[string]float64{capacity.KindNodePool: 0, capacity.KindLabels: 0}
	for k := range c.tracker.Snapshot() {
		counts[k.Kind()]++
	}
	for kind, n := range counts {
		metrics.CapacityUnavailable.WithLabelValues(kind).Set(n)
	}
}
