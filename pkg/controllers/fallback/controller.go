// Package capacity is the capacity detector: it runs on the elected leader,
// watches the pods apportion placed (by their signed decision) that the
// scheduler cannot place, reads what Karpenter says about them and their
// NodePool, and marks the NodePool (Karpenter mode) or the group's label set
// (node-label mode) out of capacity in a capacity.Tracker. It then deletes the
// stuck pods of what it marked that a ReplicaSet or StatefulSet will
// recreate, so that placement puts the new pods in groups that have capacity.
//
// The scope of a mark follows its evidence. Karpenter's own evidence about a
// NodePool marks it out for every workload (scope cluster):
//
//  1. the NodePool is gone, being deleted or not Ready (not_ready);
//  2. Karpenter says, in a pod's FailedScheduling Event, that every instance
//     type of the pool exceeds what is left of its limits, or that its node
//     limit is used up (limits). Karpenter filters instance types by the
//     remaining limits before it looks at the pod, so this holds for any pod
//     even though the pool's usage is below its limits;
//  3. Karpenter says, in an Event on the NodePool, that its requirements
//     leave no instance type (no_instance_types);
//  4. a NodeClaim of the pool failed to launch (deleted before it
//     registered, as Karpenter does on insufficient capacity, or its
//     Launched condition records an error) and none is on its way
//     (launch_failed).
//
// What one workload's pods show alone marks the pool out for that workload
// only (scope workload): nothing a tenant writes reaches another workload.
//
//  5. Karpenter says the pool has no offering for the pod now (no_offering);
//  6. the pod stayed unschedulable for NominationWait (Karpenter's batch
//     window and a margin), Karpenter's latest FailedScheduling for it
//     found it no place in the pool, and it nominated it to nothing since
//     and no NodeClaim of the pool is on its way (no_nodeclaim);
//  7. it stayed unschedulable for its timeout (--capacity-timeout, or the
//     workload's apportion.dev/capacity-timeout, at least MinTimeout) with
//     no NodeClaim of the pool on its way (timeout): a slow launch.
//
// A pod Karpenter says fits no instance type of its pool (its own requests
// or constraints) gets a Warning Event PodDoesNotFit on its workload and is
// left alone: it is the pod, not the pool. In node-label mode (no Karpenter)
// only signal 7 applies.
//
// For example, the spot pool's cpu limit leaves 1 cpu while its smallest
// instance type has 2: at 0:00 three pods of a Deployment are placed there;
// at 0:02 Karpenter writes FailedScheduling "all available instance types
// exceed limits for nodepool (NodePool=spot)" on each; at once spot is out
// for every workload, a Warning Event CapacityUnavailable names the
// headroom, and the three pods are deleted and recreated on on-demand. When
// the outage ends, the pool's limits and usage are checked again: unchanged,
// the pool stays out without a pod having to find out again; raised, it is
// back at once.
//
// Evidence older than the end of the key's last outage is not counted again:
// after an outage, a stuck pod's unschedulable time, its Karpenter Events and
// the launch failures count from when the key came back.
package fallback

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jellydator/ttlcache/v3"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/decision"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Reasons a key is out (metric label values, and the Tracker's reason).
const (
	ReasonNotReady        = "not_ready"
	ReasonLimits          = "limits"
	ReasonNoInstanceTypes = "no_instance_types"
	ReasonLaunchFailed    = "launch_failed"
	ReasonNoOffering      = "no_offering"
	ReasonNoNodeClaim     = "no_nodeclaim"
	ReasonTimeout         = "timeout"
)

// Grace is how long after a launch failure Karpenter may take to create
// another NodeClaim before the failure counts: Karpenter batches pending
// pods for up to 10 seconds before it provisions.
const Grace = 10 * time.Second

// Defaults of Options, and the floor of a workload's timeout.
const (
	DefaultTimeout        = 3 * time.Minute
	DefaultNominationWait = 12 * time.Second
	DefaultDeleteQPS      = 2
	DeleteBurst           = 5
	// MinTimeout is the shortest apportion.dev/capacity-timeout honoured:
	// a shorter one (tenant input) is raised to it, with a Warning Event.
	MinTimeout = annotations.MinCapacityTimeout
)

// noTypesFresh is how long Karpenter's NoCompatibleInstanceTypes Event on a
// NodePool counts (Karpenter repeats it at most once a minute while pods are
// pending).
const noTypesFresh = 3 * time.Minute

// Index names on the manager's caches, added by Register.
const (
	// PodKeyIndex: the capacity.Key a decided, unbound pod was placed in.
	PodKeyIndex = "apportion.capacityKey"
	// ClaimOnTheWayIndex: the NodePool of a NodeClaim that may still
	// become a node (not registered, not being deleted, launch not failed).
	ClaimOnTheWayIndex = "apportion.nodeClaimOnTheWay"
)

// PodAnnotations are the pod annotations this controller reads: an informer
// cache of pods keeps these.
var PodAnnotations = []string{annotations.Group, annotations.NodePool, annotations.CapacityTimeout}

// Options configure the detector.
type Options struct {
	// Timeout is how long a decided pod may stay unschedulable while no
	// NodeClaim of its pool is on its way (--capacity-timeout).
	Timeout time.Duration
	// NominationWait is how long an unschedulable pod may go without
	// Karpenter nominating it or creating a NodeClaim of its pool
	// (--capacity-nomination-wait): Karpenter's batch window and a margin.
	NominationWait time.Duration
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
	// Signer recognises apportion's decisions; a pod whose decision
	// annotations it does not verify is not watched. Required.
	Signer *decision.Signer
	// APIReader reads a stuck pod's requests (the cached pods carry no
	// containers) for the Event of a new outage; nil: not named.
	APIReader client.Reader
}

// Limiter paces the deletions; *rate.Limiter is one.
type Limiter interface {
	Wait(ctx context.Context) error
}

// Controller detects keys out of capacity and deletes their stuck pods.
type Controller struct {
	kubeClient client.Client
	clock      clock.Clock
	recorder   *apevents.Recorder
	tracker    *capacity.Tracker
	opts       Options
	limiter    Limiter
	deletions  chan event.TypedGenericEvent[*corev1.Pod]
	rechecks   chan poolEvent

	mu           sync.Mutex
	failures     map[string]time.Time   // NodePool -> its latest launch failure
	failedClaims map[types.UID]struct{} // NodeClaims whose failure is recorded
	noTypes      map[string]time.Time   // NodePool -> Karpenter's latest NoCompatibleInstanceTypes
	outages      map[string]outage      // NodePool -> the evidence of its cluster-wide outage
	pods         *ttlcache.Cache[types.UID, podEvents]
}

// NewController builds the detector. A zero Timeout or NominationWait takes
// the default.
func NewController(clk clock.Clock, kubeClient client.Client, recorder events.EventRecorder, tracker *capacity.Tracker, opts Options) *Controller {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.NominationWait <= 0 {
		opts.NominationWait = DefaultNominationWait
	}
	if opts.Signer == nil {
		opts.Signer = decision.RandomSigner()
	}
	opts.DeleteQPS = max(opts.DeleteQPS, 0)
	return &Controller{
		kubeClient: kubeClient, clock: clk, recorder: apevents.NewRecorder(recorder), tracker: tracker, opts: opts,
		limiter:      rate.NewLimiter(rate.Limit(opts.DeleteQPS), DeleteBurst),
		deletions:    make(chan event.TypedGenericEvent[*corev1.Pod], deletionBuffer),
		rechecks:     make(chan poolEvent, 64),
		failures:     map[string]time.Time{},
		failedClaims: map[types.UID]struct{}{},
		noTypes:      map[string]time.Time{},
		outages:      map[string]outage{},
		pods: ttlcache.New(ttlcache.WithTTL[types.UID, podEvents](30*time.Minute),
			ttlcache.WithCapacity[types.UID, podEvents](200_000)),
	}
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "capacity" }

// watched: the pods the controller reconciles: placed by apportion (the
// decision's signature verifies), unbound, alive.
func (c *Controller) watched(pod *corev1.Pod) bool {
	_, decided := pod.Annotations[annotations.Group]
	return decided && pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && c.opts.Signer.Verify(pod) == nil
}

// keyOf is the key a pod is stuck in: placed by apportion (gate removed),
// unbound, Pending, not being deleted; in Karpenter mode, placed in a
// NodePool. It is the cluster-wide key; the workload's is
// capacity.Scoped(scope, key).
func (c *Controller) keyOf(pod *corev1.Pod) (capacity.Key, bool) {
	if pod.Status.Phase != corev1.PodPending || decision.HasGate(pod) || !c.watched(pod) {
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

// Reconcile evaluates one pod: marks its key (for every workload or for its
// own) when a signal fires, queues the pod's deletion while its key is out,
// and otherwise comes back when a signal could fire.
func (c *Controller) Reconcile(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	key, ok := c.keyOf(pod)
	if !ok {
		return reconcile.Result{}, nil
	}
	info, ref := c.resolve(ctx, pod)
	scoped := capacity.Scoped(scopeOf(pod, info), key)
	now := c.clock.Now()
	lastBack := time.Time{}
	for _, k := range []capacity.Key{key, scoped} {
		out, _, until := c.tracker.Unavailable(k)
		if out {
			// A pod left (not recreated, or a NodeClaim on its way) is
			// looked at again when the outage ends.
			c.queueDeletion(pod)
			return reconcile.Result{RequeueAfter: max(until.Sub(now), time.Second)}, nil
		}
		if until.After(lastBack) {
			lastBack = until
		}
	}
	since, ok := unschedulableSince(pod)
	if !ok {
		return reconcile.Result{}, nil // the pod's next status update brings it back
	}
	if lastBack.After(since) {
		since = lastBack
	}
	timeout := c.timeoutFor(pod, info, ref)
	sig, err := c.evaluate(ctx, pod, key, since, lastBack, timeout, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case sig.misfit:
		c.warnMisfit(ctx, pod, ref, key, sig.detail)
		return reconcile.Result{}, nil // its next Karpenter Event brings it back
	case sig.reason == "" && sig.wake.IsZero():
		return reconcile.Result{}, nil
	case sig.reason == "":
		return reconcile.Result{RequeueAfter: max(sig.wake.Sub(now), time.Second)}, nil
	}
	mark := scoped
	if sig.wide {
		mark = key
	}
	until, newly := c.tracker.Mark(mark, sig.reason)
	if newly {
		if sig.wide && !c.opts.NodeLabels {
			c.recordOutage(key.Name(), sig)
		}
		c.report(ctx, pod, mark, sig, until, ref)
		c.queueKey(ctx, mark)
	}
	c.queueDeletion(pod)
	return reconcile.Result{RequeueAfter: max(until.Sub(now), time.Second)}, nil
}

// scopeOf is the workload a pod's own evidence reaches: its workload's UID,
// or the pod's for a pod without one.
func scopeOf(pod *corev1.Pod, info *workload.Info) string {
	if info != nil && info.Workload.UID != "" {
		return string(info.Workload.UID)
	}
	return string(pod.UID)
}

// queueDeletion queues the pod for the deleter if its controller recreates
// it and deletions are on.
func (c *Controller) queueDeletion(pod *corev1.Pod) {
	if c.opts.DeleteQPS > 0 && workload.Recreated(pod) {
		c.queue(pod)
	}
}

// signal is the outcome of an evaluation: a reason to mark the key (for
// every workload when wide), with a description for the Event; or a pod
// that does not fit its pool (misfit); or when to look again (zero: on
// events only).
type signal struct {
	reason string
	detail string
	wide   bool
	misfit bool
	wake   time.Time
	// np is the NodePool as the evidence saw it (wide Karpenter-mode
	// signals), for checking the evidence again when the outage ends.
	np *karpv1.NodePool
}

// evaluate looks for a signal against key for a pod unschedulable since
// since (not before lastBack, the end of the key's last outage).
func (c *Controller) evaluate(ctx context.Context, pod *corev1.Pod, key capacity.Key, since, lastBack time.Time, timeout time.Duration, now time.Time) (signal, error) {
	waited := now.Sub(since)
	if c.opts.NodeLabels {
		if waited >= timeout {
			return signal{reason: ReasonTimeout, detail: fmt.Sprintf("pod %s stayed unschedulable for %s", pod.Name, timeout)}, nil
		}
		return signal{wake: since.Add(timeout)}, nil
	}
	pool := key.Name()

	// The NodePool itself, as Karpenter keeps it.
	np := &karpv1.NodePool{}
	if err := c.kubeClient.Get(ctx, client.ObjectKey{Name: pool}, np); err != nil {
		if !apierrors.IsNotFound(err) {
			return signal{}, fmt.Errorf("getting NodePool %s: %w", pool, err)
		}
		np = nil
	}
	if sig, bad := poolState(np); bad {
		sig.np = np
		return sig, nil
	}
	if at := c.noTypesAt(pool); at.After(lastBack) && now.Sub(at) < noTypesFresh {
		return signal{reason: ReasonNoInstanceTypes, wide: true, np: np,
			detail: "Karpenter: NodePool requirements filtered out all compatible available instance types"}, nil
	}

	claimUntil, newestClaim, err := c.onTheWay(ctx, pool, timeout, now)
	if err != nil {
		return signal{}, err
	}
	// What Karpenter said about this pod in its latest scheduling round:
	// a failure newer than its nomination and than the pool's newest
	// NodeClaim (which may be for it).
	pe := c.podEventsOf(pod.UID)
	failedFresh := !pe.failedAt.Before(since.Add(-time.Second)) && pe.failedAt.After(lastBack) && pe.failedAt.After(pe.nominatedAt) && !newestClaim.After(pe.failedAt)
	if failedFresh {
		v := capacity.ReadFailedScheduling(pe.failed, pool)
		switch v.Finding {
		case capacity.FindingLimits:
			// Karpenter computes this from the pool's limits; a pool
			// without limits cannot be at them (the Event is not
			// Karpenter's).
			if len(np.Spec.Limits) > 0 {
				return signal{reason: ReasonLimits, wide: true, np: np, detail: "Karpenter: " + v.Detail}, nil
			}
		case capacity.FindingDoesNotFit:
			return signal{misfit: true, detail: v.Detail}, nil
		case capacity.FindingNoOffering:
			return signal{reason: ReasonNoOffering, detail: "Karpenter: " + v.Detail}, nil
		}
	}

	// Is Karpenter launching a node for the pool? Then wait for it to be
	// initialised, fail, or outlast the timeout (NodeClaim events come
	// sooner).
	if claimUntil.After(now) {
		return signal{wake: claimUntil}, nil
	}
	wake := since.Add(timeout)
	if failed, ok := c.failure(pool); ok && failed.After(lastBack) && now.Sub(failed) < timeout {
		if settled := failed.Add(Grace); now.Before(settled) {
			wake = earliest(wake, settled)
		} else {
			return signal{reason: ReasonLaunchFailed, wide: true, np: np,
				detail: fmt.Sprintf("a NodeClaim of the NodePool failed to launch %s ago and none is on its way", now.Sub(failed).Round(time.Second))}, nil
		}
	}
	// Karpenter looked at the pod in its latest round and found it no
	// place in the NodePool (and nothing since): its Nominated Events are
	// rate-limited across pods, so their absence alone says nothing.
	if failedFresh {
		if waited >= c.opts.NominationWait {
			return signal{reason: ReasonNoNodeClaim, detail: fmt.Sprintf("pod %s stayed unschedulable for %s; Karpenter created no NodeClaim of the NodePool for it and nominated it to none", pod.Name, waited.Round(time.Second))}, nil
		}
		wake = earliest(wake, since.Add(c.opts.NominationWait))
	}
	if waited >= timeout {
		return signal{reason: ReasonTimeout, detail: fmt.Sprintf("pod %s stayed unschedulable for %s with no NodeClaim on its way", pod.Name, timeout)}, nil
	}
	return signal{wake: wake}, nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
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
// when its workload is unknown), at least MinTimeout, else the default; an
// invalid or too short value gives a Warning Event once an hour per
// workload and value.
func (c *Controller) timeoutFor(pod *corev1.Pod, info *workload.Info, ref *corev1.ObjectReference) time.Duration {
	raw := pod.Annotations[annotations.CapacityTimeout]
	if info != nil {
		raw = info.CapacityTimeout
	}
	if raw == "" {
		return c.opts.Timeout
	}
	d, err := time.ParseDuration(strings.TrimSpace(raw))
	switch {
	case err == nil && d >= MinTimeout:
		return d
	case err == nil && d > 0:
		c.warnOnce(ref, "InvalidCapacityTimeout", raw, "%s %q is below the %s floor; using %s", annotations.CapacityTimeout, raw, MinTimeout, MinTimeout)
		return MinTimeout
	}
	c.warnOnce(ref, "InvalidCapacityTimeout", raw, "%s %q is not a positive duration (such as 5m); using %s", annotations.CapacityTimeout, raw, c.opts.Timeout)
	return c.opts.Timeout
}

// warnOnce records a Warning Event on ref once an hour per reason and key;
// it reports whether it did.
func (c *Controller) warnOnce(ref *corev1.ObjectReference, reason, key, format string, args ...any) bool {
	return c.recorder.Publish(apevents.Event{Regarding: ref, Type: corev1.EventTypeWarning, Reason: reason, Action: "Detect",
		Message: fmt.Sprintf(format, args...), DedupeValues: []string{string(ref.UID), key}, DedupeTimeout: time.Hour})
}

// warnMisfit tells the workload that Karpenter finds no instance type of
// its pool for the pod: its own requests or constraints, which apportion
// leaves to the workload's owner.
func (c *Controller) warnMisfit(ctx context.Context, pod *corev1.Pod, ref *corev1.ObjectReference, key capacity.Key, detail string) {
	if c.warnOnce(ref, "PodDoesNotFit", key.Name(),
		"Karpenter finds no instance type of NodePool %s for pod %s (%s); apportion leaves the pod as it is: its own requests or constraints must change",
		key.Name(), pod.Name, detail) {
		log.FromContext(ctx).Info("pod fits no instance type of its NodePool; left alone", "nodepool", key.Name(),
			"workload", ref.Kind+" "+ref.Namespace+"/"+ref.Name, "detail", detail)
	}
}

// report emits what a new outage gives: a Warning Event on the workload of
// the pod that showed it, the metric, one log line.
func (c *Controller) report(ctx context.Context, pod *corev1.Pod, key capacity.Key, sig signal, until time.Time, ref *corev1.ObjectReference) {
	what := "NodePool " + key.Name()
	if key.Kind() == capacity.KindLabels {
		what = "node labels " + key.Name()
	}
	scope := "cluster"
	detail := sig.detail
	if sig.reason == ReasonLimits && sig.np != nil {
		detail = headroom(sig.np, c.usage(ctx, sig.np), c.requests(ctx, pod)) + "; " + detail
	}
	if key.Scope() != "" {
		scope = "workload"
		c.recorder.Eventf(ref, nil, corev1.EventTypeWarning, "CapacityUnavailable", "Detect",
			"%s gives this workload no capacity (%s: %s); its pending pods there are recreated and its pods go to its other groups until %s",
			what, sig.reason, detail, until.UTC().Format(time.RFC3339))
	} else {
		c.recorder.Eventf(ref, nil, corev1.EventTypeWarning, "CapacityUnavailable", "Detect",
			"%s cannot get capacity (%s: %s); its pending pods are recreated and pods go to the other groups until %s",
			what, sig.reason, detail, until.UTC().Format(time.RFC3339))
	}
	metrics.CapacityUnavailableTotal.WithLabelValues(key.Kind(), scope, sig.reason).Inc()
	c.updateGauge()
	log.FromContext(ctx).Info("capacity unavailable", "key", string(key), "scope", scope, "reason", sig.reason, "detail", detail,
		"until", until.UTC().Format(time.RFC3339), "workload", ref.Kind+" "+ref.Namespace+"/"+ref.Name)
}

// requests reads the pod's requests from the API (the cache drops
// containers); nil when it cannot.
func (c *Controller) requests(ctx context.Context, pod *corev1.Pod) corev1.ResourceList {
	if c.opts.APIReader == nil {
		return nil
	}
	full := &corev1.Pod{}
	if err := c.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), full); err != nil {
		return nil
	}
	return podRequests(full)
}

// queueKey queues every pending pod of key for deletion (the deleter checks
// each one); for a workload's key, only that workload's pods.
func (c *Controller) queueKey(ctx context.Context, key capacity.Key) {
	if c.opts.DeleteQPS <= 0 {
		return
	}
	var pods corev1.PodList
	if err := c.kubeClient.List(ctx, &pods, client.MatchingFields{PodKeyIndex: string(key.Base())}, client.UnsafeDisableDeepCopy); err != nil {
		// Each pod's own reconcile queues it while the key is out.
		log.FromContext(ctx).Error(err, "listing the pods of a key out of capacity", "key", string(key))
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if key.Scope() != "" {
			if info, _ := c.resolve(ctx, pod); scopeOf(pod, info) != key.Scope() {
				continue
			}
		}
		c.queueDeletion(pod)
	}
}
