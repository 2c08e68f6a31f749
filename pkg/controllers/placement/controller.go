// Package placement is the placement controller: the one writer of decisions.
// It runs on the elected leader only, watches pods held by the placement
// gate, chooses each pod's group with the apportioning engine from the
// revision's counts (a Tally fed by the pod informer, plus the decisions this
// process made that the informer has not shown yet), and writes the decision
// and removes the gate in one patch. Decisions
// within a revision are serialised, so a burst of pods from the ReplicaSet
// controller is decided one pod at a time against exact counts.
//
// What is where: controller.go, the controller, its options and Reconcile
// (the pod's workload, then a placement by strategy, the groups served asked
// of capacity.Capacity); read.go, each request's pod read from the pod
// informer's store as a shared, read-only view; images.go, the images'
// architectures and the placement by architecture alone; tally.go, the counts, and strays.go, the
// pods admitted without a decision counted by their node's labels (not those
// released beyond caps); write.go, the decision's patch (with the pod's
// deletion cost when it can be told), the release without one
// (decision.Release), the release beyond caps that says so on the pod
// (decision.MarkBeyondCaps), and the release of a pod whose decision an
// admission policy refused; expiry.go, the singleton controller that expires pending decisions;
// locks.go, the per-revision lock; queue.go, the oldest-first queue order;
// leader.go, the check before each write that this replica still holds a
// fresh placement Lease;
// warm.go, the image cache warmed on the replicas that do not lead;
// shadow.go, shadow mode: pods decided as usual but not changed, the
// decision recorded in the apportion.dev/shadow annotation alone and
// tallied apart from the real ones (bound, the pods are strays of the real
// revision, for when the workload leaves shadow mode).
package placement

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/imagearch"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// workers decide pods in parallel: decisions within a revision take turns
// only for the choice itself (decide), and the patches, one API round trip
// each, overlap. A busy API server answers a patch in a few hundred
// milliseconds, so the decision rate is about workers / latency: 16 workers
// kept up with 2,000 pods created at once but not with 10,000.
const workers = 64

// warnInterval spaces identical Warning Events on one workload.
const warnInterval = time.Minute

// Release reasons (metric label values).
const (
	ReasonNoWorkload      = "no_workload"
	ReasonNoStrategy      = "no_strategy"
	ReasonSkipped         = "skipped"
	ReasonInvalidStrategy = "invalid_strategy"
	ReasonNoGroup         = "no_group"
	ReasonError           = "error"
	// ReasonImageError: an architecture-only pod whose images could not
	// be inspected in time.
	ReasonImageError = "image_error"
	// ReasonNoArchitecture: no group, NodePool or node can run the
	// architectures the pod's images share (or they share none).
	ReasonNoArchitecture = "no_architecture"
	// ReasonBeyondCaps: every group that takes pods past its base holds
	// its cap (max=N): the pod is placed without a group, as the strategy
	// says, and its deletion cost is the lowest of the revision's.
	ReasonBeyondCaps = "beyond_caps"
)

// Decision record reasons.
const (
	RecordQuota        = "quota"
	RecordArchitecture = "architecture"
	// RecordFallback: placed while some group of the strategy was out of
	// capacity (the others shared its part).
	RecordFallback = "fallback"
	// RecordBeyondCaps: released without a group, every group with a
	// weight at its cap (ReasonBeyondCaps).
	RecordBeyondCaps = ReasonBeyondCaps
)

// Controller places gated pods.
type Controller struct {
	kubeClient  client.Client
	clock       clock.Clock
	recorder    *apevents.Recorder
	capacity    capacity.Capacity
	tally       *Tally
	gateWait    time.Duration
	nodes       client.Reader // node metadata, to count strays; nil: not counted
	apiReader   client.Reader // reads a pod again after a conflict; nil: decided again later
	images      Images        // nil: no image is inspected
	imageWait   time.Duration
	archForAll  bool                       // place every pod without a strategy by architecture, not only those opted in
	archRules   decision.ArchitectureRules // node-label mode: tolerations and node labels by architecture
	signer      *decision.Signer
	resolve     []workload.Option // PlacementPolicies, when their CRD is installed; the default mode
	defaultMode string            // --default-mode, for pods without a workload
	excluded    sets.Set[string]  // namespaces never touched, for shadow mode
	namespaces  bool              // namespace metadata is cached: the ignore label is read
	lease       *Lease            // nil: no leader election, always decide
	deposed     atomic.Bool       // this replica found it does not lead, and said so

	locks      keyedMutex
	strategies *compiled.Cache
}

// NewController builds the placement controller. notCachedWait bounds how long
// a pod whose owner the cache has not seen yet is retried before it is left
// to the gate janitor.
func NewController(clk clock.Clock, kubeClient client.Client, recorder events.EventRecorder, groupCapacity capacity.Capacity, tally *Tally, notCachedWait time.Duration) *Controller {
	c := &Controller{kubeClient: kubeClient, clock: clk, recorder: apevents.NewRecorder(recorder), capacity: groupCapacity, tally: tally, gateWait: notCachedWait,
		strategies: compiled.NewCache(compiled.DefaultSize),
		signer:     decision.RandomSigner()}
	return c
}

// WithStrategies compiles strategies through cache, shared with the other
// controllers, instead of a cache of its own.
func (c *Controller) WithStrategies(cache *compiled.Cache) *Controller {
	c.strategies = cache
	return c
}

// WithSigner signs every decision with s, the key the replicas share, so
// that the capacity detector (on whichever replica leads) can tell
// apportion's decisions from annotations a client wrote.
func (c *Controller) WithSigner(s *decision.Signer) *Controller {
	if s != nil {
		c.signer = s
	}
	return c
}

// WithAPIReader reads a pod from the API server when a decision's patch
// conflicts, to send the same decision again (see write).
func (c *Controller) WithAPIReader(r client.Reader) *Controller {
	c.apiReader = r
	return c
}

// WithPolicies makes workloads without a strategy annotation take the
// strategy of the PlacementPolicy that targets them; src may be nil.
func (c *Controller) WithPolicies(src workload.PolicySource) *Controller {
	c.resolve = append(c.resolve, workload.WithPolicies(src)) // nil src: annotations only
	return c
}

// WithDefaultMode is the mode of the workloads that name none
// (--default-mode): with annotations.ModeShadow, their pods are decided but
// not changed.
func (c *Controller) WithDefaultMode(mode string) *Controller {
	c.defaultMode = mode
	c.resolve = append(c.resolve, workload.WithDefaultMode(mode))
	return c
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "placement" }

// Register adds the controller to the manager, with the singleton that
// expires the tally's pending decisions and, when images are inspected, the
// controller that warms the image cache of the replicas that do not lead.
func (c *Controller) Register(ctx context.Context, m manager.Manager) error {
	if err := (&pendingExpiry{clock: c.clock, tally: c.tally}).Register(ctx, m); err != nil {
		return fmt.Errorf("registering the pending decisions' expiry: %w", err)
	}
	if c.images != nil {
		if err := (&imageWarmer{images: c.images, wait: c.imageWait}).Register(ctx, m); err != nil {
			return fmt.Errorf("registering the image warmer: %w", err)
		}
	}
	r, err := c.reconciler(ctx, m)
	if err != nil {
		return err
	}
	return controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		Watches(&corev1.Pod{}, oldestFirst{}, builder.WithPredicates(Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// Predicate passes the pod events the controller acts on: every event of a
// gated pod, and the creation (the informer's initial list included, so a
// new leader catches up) of a pod that may be in shadow mode: ungated,
// undecided, controller-owned and not terminating. Reconcile tells the
// latter apart by their workload's mode, once per pod.
func Predicate() predicate.Predicate {
	gated := func(o client.Object) bool {
		gates, ok := podcache.Gates(o)
		return ok && decision.GatedBy(gates)
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return gated(e.Object) || shadowCandidate(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return gated(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return gated(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return gated(e.Object) },
	}
}

// Reconcile decides one gated pod, or one ungated pod in shadow mode. The
// pod is the informer's cached pod as podcache.View gives it, shared with
// every other reader: it is read only, and each write works on a copy of
// its own.
func (c *Controller) Reconcile(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	gated := decision.HasGate(pod)
	if podutil.IsTerminating(pod) || (!gated && !shadowCandidate(pod)) {
		return reconcile.Result{}, nil
	}
	if !c.tally.Synced() {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if c.tally.Decided(pod.UID) {
		return reconcile.Result{}, nil // decided; the cache has not caught up
	}
	if !gated {
		return c.reconcileShadow(ctx, pod) // checks the Lease before its write
	}
	if res, no := c.notLeading(ctx, "", ""); no {
		return res, nil
	}
	podRef := &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	key := workload.OwnerKey(pod)
	if key == "" {
		if c.byArchitecture(ctx, pod, nil) {
			return c.placeByArchitecture(ctx, pod, podRef, c.podMode(pod) == annotations.ModeShadow)
		}
		return c.release(ctx, pod, ReasonNoWorkload, nil)
	}
	info, err := workload.Resolve(ctx, c.kubeClient, pod.Namespace, pod, c.resolve...)
	switch {
	case errors.Is(err, workload.ErrNotCached):
		if c.clock.Since(pod.CreationTimestamp.Time) < c.gateWait {
			return reconcile.Result{RequeueAfter: 250 * time.Millisecond}, nil
		}
		return c.release(ctx, pod, ReasonError, err)
	case err != nil:
		return c.release(ctx, pod, ReasonError, err)
	case info == nil && c.byArchitecture(ctx, pod, nil):
		return c.placeByArchitecture(ctx, pod, podRef, c.podMode(pod) == annotations.ModeShadow)
	case info == nil:
		return c.release(ctx, pod, ReasonNoWorkload, nil)
	case info.Skip:
		return c.release(ctx, pod, ReasonSkipped, nil)
	case !info.Found && c.byArchitecture(ctx, pod, info):
		return c.placeByArchitecture(ctx, pod, info.Workload.ObjectReference(), info.Shadow())
	case !info.Found:
		return c.release(ctx, pod, ReasonNoStrategy, nil)
	}
	return c.placeByStrategy(ctx, pod, key, info)
}

// placeByStrategy decides a pod by its workload's strategy: what does not
// depend on the revision's counts first (the strategy, the images, the groups
// that can be served), then, under the revision's lock, the group the engine
// gives the next pod.
func (c *Controller) placeByStrategy(ctx context.Context, pod *corev1.Pod, key string, info *workload.Info) (reconcile.Result, error) {
	p, perr := c.strategies.Get(info.Strategy)
	ref := info.Workload.ObjectReference()
	if perr != nil {
		c.warnOnce(ref, "InvalidStrategy", "%s: %v; pods are placed without apportion", info.Source, perr)
		return c.release(ctx, pod, ReasonInvalidStrategy, nil)
	}

	// Images first, outside the revision's lock: a slow registry must not
	// hold up the decisions of pods whose images are cached.
	images, ok := c.strategyImages(ctx, pod, ref)
	if !ok {
		return c.release(ctx, pod, ReasonNoArchitecture, nil)
	}
	var archs []string
	if images != nil {
		archs = images.Architectures
	}
	scope := string(info.Workload.UID)
	choices, groupErrs, err := c.capacity.Choose(ctx, p.Strategy, pod, archs, scope)
	if err != nil {
		return c.release(ctx, pod, ReasonError, err)
	}
	avail, archOut, capacityOut, why := c.available(ctx, ref, p.Strategy, pod, images, groupErrs, scope)

	rev := Revision(pod.Namespace, key)
	if info.Shadow() {
		rev = ShadowRevision(pod.Namespace, key)
	}
	g, counts, strays, cost := c.decide(ctx, pod, rev, key, p, avail, info.Shadow())
	if g == apportion.BeyondCaps && info.Shadow() {
		// Shadow mode changes nothing on the pod: released as it is, it
		// counts where it runs, as the workload's other pods do once it
		// leaves shadow mode.
		return c.release(ctx, pod, ReasonBeyondCaps, nil)
	}
	if g == apportion.BeyondCaps {
		rec := decision.Record{Strategy: p.Hash, Revision: info.Revision, Counts: counts, Strays: strays, Reason: RecordBeyondCaps}
		if len(capacityOut) > 0 {
			rec.Out = why // served, these groups might have taken it
		}
		return c.releaseBeyondCaps(ctx, pod, ref, rec, cost)
	}
	if g < 0 && archOut {
		c.warnOnce(ref, "NoCompatibleArchitecture", "no group of the strategy can run the images' architectures (%s); pods are placed without apportion", describeImages(images))
		return c.release(ctx, pod, ReasonNoArchitecture, nil)
	}
	if g < 0 {
		c.warnOnce(ref, "NoGroupAvailable", "no group of the strategy can be served; pods are placed without apportion")
		return c.release(ctx, pod, ReasonNoGroup, nil)
	}
	d := decision.Decision{
		Group:         p.Strategy.Groups[g],
		NodePool:      choices[g].PoolName(),
		Architectures: groupArchitectures(p.Strategy.Groups[g], archs),
		Tolerations:   choices[g].Tolerations,
		Preferred:     info.Preferred(),
		DeletionCost:  cost,
		Record:        decision.Record{Strategy: p.Hash, Revision: info.Revision, Counts: counts, Strays: strays, Reason: RecordQuota},
	}
	if len(capacityOut) > 0 {
		d.Fallback, d.Record.Reason, d.Record.Out = capacityOut, RecordFallback, why
	}
	c.addArchitectureRules(&d)
	if info.Shadow() {
		res, written, err := c.writeShadow(ctx, pod, ref, d)
		if !written {
			c.tally.Unrecord(pod.UID)
		}
		return res, err
	}
	res, written, err := c.write(ctx, pod, ref, d)
	if !written {
		c.tally.Unrecord(pod.UID)
		return res, err
	}
	log.FromContext(ctx).V(1).Info("placed pod", "group", d.Group.Key(), "nodepool", d.NodePool, "counts", counts)
	return res, err
}

// decide chooses the pod's group (its index, -1 when none is available,
// apportion.BeyondCaps when every group is at its cap)
// under the revision's lock, with the counts it saw and the pod's deletion
// cost (nil when it cannot be told; beyond caps, the lowest, which the
// deletion-cost controller gives the pods beyond caps), and counts the
// decision (a fallback one
// too: it counts in the group it runs in) as pending before it is written:
// the next pod of the revision is decided while this one's patch is in
// flight, against counts that include it, so a burst is decided as fast as
// the API server takes patches rather than one round trip at a time. A write
// that does not land takes the counts back. A shadow decision (rev is the
// revision's ShadowRevision) is counted the same way, apart from the real
// ones, and has no deletion cost.
func (c *Controller) decide(ctx context.Context, pod *corev1.Pod, rev, key string, p *compiled.Strategy, avail apportion.Set, shadow bool) (g int, counts, strays []int64, cost *int) {
	unlock := c.locks.lock(key)
	defer unlock()
	counts, strays, seen := c.counts(ctx, rev, p)
	g = p.Method.Next(seen, avail)
	// A Job's or Workflow's pod has no deletion cost: the Job controller
	// does not read it, and Argo deletes no pod.
	costed := !shadow && !workload.IsBatch(pod)
	switch {
	case g == apportion.BeyondCaps && costed:
		lowest := decision.StrayCost
		return g, counts, strays, &lowest
	case g < 0:
		return g, counts, strays, nil
	case costed:
		cost = c.deletionCost(p, c.withShadowStrays(ctx, rev, p, counts), g)
	}
	c.tally.Record(pod.UID, rev, p.Strategy.Groups[g].Key(), c.clock.Now())
	return g, counts, strays, cost
}

// available is the set of groups that can be served, with a Warning Event for
// each one left out. archOut reports whether some group was left out only
// because of the images' architectures; capacityOut lists the groups left out
// because they are out of capacity for now, and why (for the decision record).
func (c *Controller) available(ctx context.Context, ref *corev1.ObjectReference, s *strategy.Strategy, pod *corev1.Pod, images *imagearch.Result, groupErrs []error, scope string) (avail apportion.Set, archOut bool, capacityOut, why []string) {
	avail = apportion.All
	var plain []error // the groups' answers without the architectures, asked only when needed
	for i, gerr := range groupErrs {
		if gerr == nil {
			continue
		}
		avail = avail.Without(i)
		if errors.Is(gerr, catalog.ErrCapacity) {
			capacityOut = append(capacityOut, s.Groups[i].Key())
			why = append(why, s.Groups[i].Key()+": "+strings.TrimPrefix(gerr.Error(), catalog.ErrCapacity.Error()+": "))
			c.warnOnce(ref, "GroupUnavailable", "group %d (%s) is left out of the split for now: %v", i+1, s.Groups[i].Key(), gerr)
			continue
		}
		if images != nil && plain == nil {
			if _, errs, err := c.capacity.Choose(ctx, s, pod, nil, scope); err == nil {
				plain = errs
			}
		}
		if plain != nil && plain[i] == nil {
			archOut = true
			c.warnOnce(ref, "GroupUnavailable", "group %d (%s) is left out of the split: it cannot run the images' architectures (%s): %v",
				i+1, s.Groups[i].Key(), describeImages(images), gerr)
			continue
		}
		c.warnOnce(ref, "GroupUnavailable", "group %d (%s) is left out of the split: %v", i+1, s.Groups[i].Key(), gerr)
	}
	return avail, archOut, capacityOut, why
}

// warnOnce records a Warning Event on the workload, at most once per
// warnInterval for the same workload and message: a burst of 1,000 pods
// would otherwise repeat it 1,000 times.
func (c *Controller) warnOnce(ref *corev1.ObjectReference, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.warn(ref, reason, msg, string(ref.UID), msg)
}

// warnEvery is warnOnce keyed by the reason alone: failures whose messages
// differ from pod to pod (a registry error) still give one Event per workload
// per warnInterval.
func (c *Controller) warnEvery(ref *corev1.ObjectReference, reason, format string, args ...any) {
	c.warn(ref, reason, fmt.Sprintf(format, args...), string(ref.UID))
}

// warn records the Event (and logs it) unless one with the same reason and
// dedupe values was recorded within warnInterval.
func (c *Controller) warn(ref *corev1.ObjectReference, reason, msg string, dedupe ...string) {
	if c.recorder.Publish(apevents.Event{Regarding: ref, Type: corev1.EventTypeWarning, Reason: reason, Action: "Place",
		Message: msg, DedupeValues: dedupe, DedupeTimeout: warnInterval}) {
		log.Log.Info(msg, "reason", reason, "kind", ref.Kind, "namespace", ref.Namespace, "name", ref.Name)
	}
}
