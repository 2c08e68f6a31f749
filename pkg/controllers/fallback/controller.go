// Package fallback holds capacity fallback's controllers. The detector runs
// on the elected leader, watches the pods apportion placed (by their signed
// decision) that the scheduler cannot place, reads what Karpenter says about
// them and their NodePool, and marks the NodePool (Karpenter mode) or the
// group's label set (node-label mode) out of capacity in a capacity.Tracker.
// It then deletes the stuck pods of what it marked that a ReplicaSet or
// StatefulSet will recreate, so that placement puts the new pods in groups
// that have capacity. A Job's pods are evicted instead: at once when the
// Job's podFailurePolicy ignores the DisruptionTarget condition the eviction
// adds; otherwise the Job counts each one as failed, so a pod goes only past
// its timeout and while the Job's backoffLimit leaves a retry. Argo does not
// recreate a Workflow's pod: it goes only when its step's retryStrategy
// would run it again.
//
// The scope of a mark follows its evidence. Karpenter's Events are hints:
// anyone who may create Events in a namespace can write one that says it is
// Karpenter's. A NodePool is out for every workload (scope cluster) only on
// the cluster's own state, or on an Event that state backs:
//
//  1. the NodePool is gone, being deleted or not Ready (not_ready);
//  2. Karpenter says, in a pod's FailedScheduling Event, that every instance
//     type of the pool exceeds what is left of its limits, or that its node
//     limit is used up, and the pool's state agrees: some limit leaves less
//     than every instance type the pool allows has, as far as its
//     requirements and the instance types launched in the cluster show
//     (capacity.Allowance), or nothing (limits). Karpenter filters instance
//     types by the remaining limits before it looks at the pod, so this
//     holds for any pod even though the pool's usage is below its limits.
//     Without that backing the Event moves the pod's workload only: a pod
//     that needs more than the pool has left says nothing about the pods
//     that fit in it, and the nodes the pool launched say nothing of the
//     smaller ones it allows;
//  3. Karpenter says, in an Event on the NodePool (its UID) in the namespace
//     it writes those to (PoolEventNamespace), that its requirements leave no
//     instance type, and the pool's state agrees: its requirements leave no
//     value of a label every instance type has, or they name their instance
//     types and each one, as launched in the cluster, is ruled out by them
//     (no_instance_types). Without that backing the Event marks nothing;
//  4. a NodeClaim of the pool failed to launch (deleted before it
//     registered, as Karpenter does on insufficient capacity, or its
//     Launched condition records an error) and none is on its way
//     (launch_failed).
//
// What one workload's pods show alone marks the pool out for that workload
// only (scope workload): nothing a tenant writes reaches another workload.
// Karpenter's Events about a pod are kept per namespace, under the pod's
// name and UID, so that one namespace's Events say nothing about another's
// pods and cannot push out what was said about them.
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
// For example, the spot pool's cpu limit leaves 1 cpu while its
// requirements allow instance types of 2 cpu and more
// (karpenter.k8s.aws/instance-cpu Gt 1): at 0:00 three pods of a Deployment
// are placed there;
// at 0:02 Karpenter writes FailedScheduling "all available instance types
// exceed limits for nodepool (NodePool=spot)" on each; at once spot is out
// for every workload, a Warning Event CapacityUnavailable names the
// headroom, and the three pods are deleted and recreated on on-demand. When
// the outage ends, the question that marked it is asked again: limits and
// usage unchanged, the pool stays out without a pod having to find out
// again; raised, it is back at once. A no_instance_types outage likewise
// lasts while the pool's requirements leave no instance type.
//
// Evidence older than the end of the key's last outage is not counted again:
// after an outage, a stuck pod's unschedulable time, its Karpenter Events and
// the launch failures count from when the key came back.
//
// The files: controller.go (the detector's Reconcile), evaluate.go (a pod's
// evidence turned into a signal), evidence.go (what Karpenter's Events and
// NodeClaims said, kept per pod and pool), limits.go (a NodePool's usage
// against its limits, by capacity's rule: LimitsBacked and AllowedTypes,
// which placement also applies before it places a pod), report.go
// (Events, metrics and the queueing of a marked key's pods), deletion.go
// (the deletion controller: a source.Channel queue, paced), batch.go (what
// it does with the pods of Jobs and Workflows), retry.go and
// workflowretry.go (what deleting one costs its Job or Workflow), outage.go (the NodePool
// outage controller that checks an outage's evidence again when the
// NodePool changes: a cluster-wide one also at its end),
// gauge.go (the outage gauge, a periodic singleton) and register.go
// (indexes, watches and handlers).
package fallback

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jellydator/ttlcache/v3"
	"golang.org/x/time/rate"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/decision"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/podcache"
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
var PodAnnotations = []string{annotations.Group, annotations.NodePool, annotations.CapacityTimeout,
	// what a retry costs (retry.go, workflowretry.go): read from a pod
	// fetched afresh, declared so that a cached pod would have them too
	batchv1.JobCompletionIndexAnnotation, batchv1.JobIndexFailureCountAnnotation, argoNodeIDAnnotation}

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
	// podIndexer is the pod informer's indexer, which holds PodKeyIndex;
	// nil: the pods are listed through kubeClient.
	podIndexer toolscache.Indexer

	mu           sync.Mutex
	failures     map[string]time.Time                          // NodePool -> its latest launch failure
	failedClaims map[types.UID]struct{}                        // NodeClaims whose failure is recorded
	noTypes      map[string]poolEvents                         // NodePool -> Karpenter's latest NoCompatibleInstanceTypes
	outages      map[capacity.Key]outage                       // a NodePool's key, or a workload's, -> the evidence of its outage
	pods         map[string]*ttlcache.Cache[podRef, podEvents] // namespace -> its pods' Events

	jobs    *ttlcache.Cache[types.UID, jobPolicy]    // Job UID -> what its pods' deletion needs
	kept    *ttlcache.Cache[types.UID, struct{}]     // batch pods left pending, counted once
	retried *ttlcache.Cache[types.UID, []retriedPod] // Job UID -> its pods deleted at the cost of a retry, not counted yet
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
		noTypes:      map[string]poolEvents{},
		outages:      map[capacity.Key]outage{},
		pods:         map[string]*ttlcache.Cache[podRef, podEvents]{},
		jobs:         newJobCache(),
		kept:         newKeptCache(),
		retried:      newRetriedCache(),
	}
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "capacity" }

// watched: the pods the controller reconciles: placed by apportion (the
// decision's signature verifies), unbound, alive.
func (c *Controller) watched(pod *corev1.Pod) bool {
	_, decided := pod.Annotations[annotations.Group]
	return decided && !podutil.IsScheduled(pod) && !podutil.IsTerminating(pod) && c.opts.Signer.Verify(pod) == nil
}

// keyOf is the key a pod is stuck in: placed by apportion (gate removed),
// unbound, Pending, not being deleted; in Karpenter mode, placed in a
// NodePool. It is the cluster-wide key; the workload's is
// capacity.Scoped(scope, key).
func (c *Controller) keyOf(pod *corev1.Pod) (capacity.Key, bool) {
	if !podutil.IsPending(pod) || decision.HasGate(pod) || !c.watched(pod) {
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
	pod, ok := podcache.View(o)
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
			// looked at again when the outage ends; one the full queue
			// did not take, sooner.
			if !c.queueDeletion(pod) {
				return reconcile.Result{RequeueAfter: queueFullRetry}, nil
			}
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
		if !c.opts.NodeLabels {
			c.recordOutage(ctx, mark, sig)
		}
		c.report(ctx, pod, mark, sig, until, ref)
		c.queueKey(ctx, mark)
	}
	if !c.queueDeletion(pod) {
		return reconcile.Result{RequeueAfter: queueFullRetry}, nil
	}
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

// queueDeletion queues the pod for the deleter if deletions are on and its
// controller recreates it, or it is a batch pod (the deleter decides). It is
// false only when the queue was full.
func (c *Controller) queueDeletion(pod *corev1.Pod) bool {
	if c.opts.DeleteQPS > 0 && deletable(pod) {
		return c.queue(pod)
	}
	return true
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
	return info, info.Workload.ObjectReference()
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
