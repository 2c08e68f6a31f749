package fallback

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

var now = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

const spotGroup = "karpenter.sh/capacity-type=spot"

// testSigner signs the fixtures' decisions; newFixture gives it to the
// controller unless a test passes its own.
var testSigner = func() *decision.Signer {
	s, err := decision.NewSigner([]byte("apportion-capacity-test-key-0123456789"))
	if err != nil {
		panic(err)
	}
	return s
}()

// sign writes apportion's signature of the pod's decision (its UID, group
// and NodePool annotations), as the placement webhook does.
func sign(p *corev1.Pod) *corev1.Pod {
	p.Annotations[annotations.Signature] = testSigner.Sign(p.UID, p.Annotations[annotations.Group], p.Annotations[annotations.NodePool])
	return p
}

// countingLimiter counts the waits and never blocks.
type countingLimiter struct {
	mu    sync.Mutex
	waits int
}

func (l *countingLimiter) Wait(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waits++
	return nil
}

type fixture struct {
	t       *testing.T
	client  client.Client
	clock   *clocktesting.FakeClock
	rec     *events.FakeRecorder
	tracker *capacity.Tracker
	ctrl    *Controller
	limiter *countingLimiter
}

func newFixture(t *testing.T, opts Options, funcs *interceptor.Funcs, deployAnnotations map[string]string, objs ...client.Object) *fixture {
	t.Helper()
	deploy, rs := test.Workload(deployAnnotations)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "db", UID: "sts-uid"}}
	if opts.DeleteQPS == 0 {
		opts.DeleteQPS = DefaultDeleteQPS
	}
	if opts.Signer == nil {
		opts.Signer = testSigner
	}
	indexer := &Controller{opts: opts}
	var c client.Client = fake.NewClientBuilder().WithScheme(test.Scheme()).
		WithIndex(&corev1.Pod{}, PodKeyIndex, indexer.podIndex).
		WithIndex(&karpv1.NodeClaim{}, ClaimOnTheWayIndex, claimIndex).
		WithObjects(append(objs, deploy, rs, sts)...).Build()
	if funcs != nil {
		c = interceptor.NewClient(c.(client.WithWatch), *funcs)
	}
	f := &fixture{t: t, client: c, clock: clocktesting.NewFakeClock(now), rec: events.NewFakeRecorder(100), limiter: &countingLimiter{}}
	f.tracker = capacity.NewTracker(f.clock, 3*time.Minute, 30*time.Minute)
	f.ctrl = NewController(f.clock, c, f.rec, f.tracker, opts)
	f.ctrl.limiter = f.limiter
	return f
}

type podOpt func(*corev1.Pod)

// pendingPod is a decided pod of the nginx Deployment in pool, unschedulable
// since at; its decision is signed (after opts).
func pendingPod(name, pool string, at time.Time, opts ...podOpt) *corev1.Pod {
	_, rs := test.Workload(nil)
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name + "-uid"),
		CreationTimestamp: metav1.NewTime(at.Add(-time.Second)),
		Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"},
	}, Owner: rs, Group: spotGroup, NodePool: pool, Phase: corev1.PodPending, Conditions: []corev1.PodCondition{test.Unschedulable(at)}})
	for _, o := range opts {
		o(pod)
	}
	return sign(pod)
}

func ownedBy(kind, name, uid string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = test.OwnedBy("apps/v1", kind, name, types.UID(uid))
	}
}

func withAnnotation(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Annotations[k] = v }
}

func nodePool(name string, ready metav1.ConditionStatus, mutate ...func(*karpv1.NodePool)) *karpv1.NodePool {
	np := test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid")}, Ready: ready})
	for _, m := range mutate {
		m(np)
	}
	return np
}

func nodeClaim(name, pool string, created time.Time, conds ...status.Condition) *karpv1.NodeClaim {
	return test.NodeClaim(metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid"), CreationTimestamp: metav1.NewTime(created)}, pool, conds...)
}

func (f *fixture) get(name string) (*corev1.Pod, bool) {
	f.t.Helper()
	return f.getIn("web", name)
}

func (f *fixture) getIn(namespace, name string) (*corev1.Pod, bool) {
	f.t.Helper()
	var p corev1.Pod
	err := f.client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &p)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return &p, true
}

func (f *fixture) reconcile(name string) reconcile.Result {
	f.t.Helper()
	return f.reconcileIn("web", name)
}

func (f *fixture) reconcileIn(namespace, name string) reconcile.Result {
	f.t.Helper()
	p, ok := f.getIn(namespace, name)
	if !ok {
		f.t.Fatalf("pod %s/%s not found", namespace, name)
	}
	res, err := f.ctrl.Reconcile(context.Background(), p)
	if err != nil {
		f.t.Fatalf("reconcile %s/%s: %v", namespace, name, err)
	}
	return res
}

// karpenterEvent is an Event Karpenter's provisioner writes on a pod, last
// seen at at.
func karpenterEvent(pod *corev1.Pod, reason, message string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name + "." + strings.ToLower(reason), CreationTimestamp: metav1.NewTime(at.Add(-time.Minute))},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:         reason, Message: message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: capacity.KarpenterComponent},
		FirstTimestamp: metav1.NewTime(at.Add(-time.Minute)), LastTimestamp: metav1.NewTime(at),
	}
}

// observe feeds the controller a Karpenter Event on the pod namespace/name.
func (f *fixture) observe(namespace, name, reason, message string, at time.Time) {
	f.t.Helper()
	p, ok := f.getIn(namespace, name)
	if !ok {
		f.t.Fatalf("pod %s/%s not found", namespace, name)
	}
	if got, _ := f.ctrl.ObserveEvent(karpenterEvent(p, reason, message, at)); got != client.ObjectKeyFromObject(p) {
		f.t.Fatalf("ObserveEvent %s on %s/%s returned %v", reason, namespace, name, got)
	}
}

// nominated: Karpenter's Nominated Event on web/name at at.
func (f *fixture) nominated(name string, at time.Time) {
	f.t.Helper()
	f.observe("web", name, capacity.EventNominated, "Pod should schedule on: nodeclaim/spot-a", at)
}

// failedScheduling: Karpenter's FailedScheduling Event on web/name at at.
func (f *fixture) failedScheduling(name, message string, at time.Time) {
	f.t.Helper()
	f.observe("web", name, capacity.EventFailedScheduling, message, at)
}

// queued lists the pods waiting for the deletion controller, in order and
// each once (as its workqueue holds them), leaving them queued.
func (f *fixture) queued() []types.NamespacedName {
	var names []types.NamespacedName
	seen := map[types.NamespacedName]bool{}
	var events []event.TypedGenericEvent[*corev1.Pod]
	for len(f.ctrl.deletions) > 0 {
		e := <-f.ctrl.deletions
		events = append(events, e)
		if n := client.ObjectKeyFromObject(e.Object); !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, e := range events {
		f.ctrl.deletions <- e
	}
	return names
}

// enqueue queues a pod by name, as queue does.
func (f *fixture) enqueue(name types.NamespacedName) {
	f.ctrl.deletions <- event.TypedGenericEvent[*corev1.Pod]{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name}}}
}

// drain runs the deletion controller over what is queued.
func (f *fixture) drain() {
	for f.drainOne() {
	}
}

// drainOne runs the deletion controller over the first pod queued, if any,
// taking it out of the queue as its workqueue would (with any repeat).
func (f *fixture) drainOne() bool {
	names := f.queued()
	if len(names) == 0 {
		return false
	}
	var rest []event.TypedGenericEvent[*corev1.Pod]
	for len(f.ctrl.deletions) > 0 {
		if e := <-f.ctrl.deletions; client.ObjectKeyFromObject(e.Object) != names[0] {
			rest = append(rest, e)
		}
	}
	for _, e := range rest {
		f.ctrl.deletions <- e
	}
	if _, err := f.ctrl.reconcileDeletion(context.Background(), reconcile.Request{NamespacedName: names[0]}); err != nil {
		f.t.Errorf("deleting %s: %v", names[0], err)
	}
	return true
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (f *fixture) out(key capacity.Key) (bool, string) {
	out, reason, _ := f.tracker.Unavailable(key)
	return out, reason
}

// TestNotReady: a NodePool that is not Ready is Karpenter's own state: it is
// out for every workload at once, and its stuck pods are deleted.
func TestNotReady(t *testing.T) {
	spot := capacity.PoolKey("spot")
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionFalse), pendingPod("p1", "spot", now.Add(-4*time.Second)))
	before := testutil.ToFloat64(metrics.CapacityUnavailableTotal.WithLabelValues(capacity.KindNodePool, "cluster", ReasonNotReady))

	res := f.reconcile("p1")
	if out, reason := f.out(spot); !out || reason != ReasonNotReady {
		t.Fatalf("out %v reason %q; want not_ready", out, reason)
	}
	if res.RequeueAfter != 3*time.Minute {
		t.Errorf("RequeueAfter %s, want the end of the outage", res.RequeueAfter)
	}
	if out, _ := f.out(capacity.Scoped("deploy-uid", spot)); out {
		t.Error("marked for the workload as well")
	}
	evs := f.events()
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning CapacityUnavailable NodePool spot cannot get capacity (not_ready: the NodePool is not Ready (Testing: set by the test))") {
		t.Errorf("events %q", evs)
	}
	if got := testutil.ToFloat64(metrics.CapacityUnavailableTotal.WithLabelValues(capacity.KindNodePool, "cluster", ReasonNotReady)) - before; got != 1 {
		t.Errorf("unavailable_total grew by %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.CapacityUnavailable.WithLabelValues(capacity.KindNodePool, "cluster")); got != 1 {
		t.Errorf("unavailable gauge %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.CapacityUnavailable.WithLabelValues(capacity.KindNodePool, "workload")); got != 0 {
		t.Errorf("unavailable gauge (workload) %v, want 0", got)
	}
	deleted := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultDeleted))
	f.drain()
	if _, ok := f.get("p1"); ok {
		t.Error("stuck pod not deleted")
	}
	if got := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultDeleted)) - deleted; got != 1 {
		t.Errorf("pods_deleted_total grew by %v, want 1", got)
	}
	// A second pod of the key: no second Event, deleted too.
	if err := f.client.Create(context.Background(), pendingPod("p2", "spot", now)); err != nil {
		t.Fatal(err)
	}
	f.reconcile("p2")
	f.drain()
	if _, ok := f.get("p2"); ok {
		t.Error("second stuck pod not deleted")
	}
	if evs := f.events(); len(evs) != 0 {
		t.Errorf("events for an outage already reported: %q", evs)
	}
}

// TestReadyPoolWithinTimeoutIsNotMarked: a pod of a Ready pool that
// Karpenter nominated waits for its timeout; nothing is marked meanwhile.
func TestReadyPoolWithinTimeoutIsNotMarked(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue), pendingPod("p1", "spot", now.Add(-time.Minute)))
	f.nominated("p1", now.Add(-30*time.Second))
	if res := f.reconcile("p1"); res.RequeueAfter != 2*time.Minute {
		t.Errorf("RequeueAfter %s, want the 2m left of the timeout", res.RequeueAfter)
	}
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked before the timeout: %v", snap)
	}
}

func TestMissingNodePool(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, pendingPod("p1", "gone", now.Add(-time.Minute)))
	f.reconcile("p1")
	if out, reason := f.out(capacity.PoolKey("gone")); !out || reason != ReasonNotReady {
		t.Fatalf("missing NodePool: out %v reason %q", out, reason)
	}
	if evs := f.events(); len(evs) != 1 || !strings.Contains(evs[0], "(not_ready: the NodePool does not exist)") {
		t.Errorf("events %q", evs)
	}
}

// TestLimits: a pool is out for every workload on its limits only when
// Karpenter says so in a pod's FailedScheduling Event, about that pool, and
// the pool has limits; its usage at or above a limit is no signal by itself
// (Karpenter counts launching NodeClaims in it and launches up to the limit).
func TestLimits(t *testing.T) {
	q := resource.MustParse
	const (
		limitsSpot = "Failed to schedule pod, all available instance types exceed limits for nodepool (NodePool=spot)"
		nodesSpot  = "Failed to schedule pod, node limits have been exhausted for nodepool (NodePool=spot)"
		limitsGPU  = "Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [gpu]; " +
			"all available instance types exceed limits for nodepool (NodePool=gpu)"
	)
	for _, tc := range []struct {
		name         string
		limits, used corev1.ResourceList
		node         string // cpu of the pool's one launched NodeClaim (its only instance type); "": none
		message      string
		at           time.Duration // when Karpenter wrote it, from now
		want         bool
	}{
		{"cpu at limit, no Event", corev1.ResourceList{corev1.ResourceCPU: q("10")}, corev1.ResourceList{corev1.ResourceCPU: q("10")}, "", "", 0, false},
		{"memory above limit, no Event", corev1.ResourceList{corev1.ResourceMemory: q("32Gi")}, corev1.ResourceList{corev1.ResourceMemory: q("40Gi")}, "", "", 0, false},
		{"nodes at limit, no Event", corev1.ResourceList{"nodes": q("3")}, corev1.ResourceList{"nodes": q("3")}, "", "", 0, false},
		{"exceed limits, usage at the limit", corev1.ResourceList{corev1.ResourceCPU: q("10")}, corev1.ResourceList{corev1.ResourceCPU: q("10")}, "", limitsSpot, 0, true},
		{"exceed limits, less left than its smallest node", corev1.ResourceList{corev1.ResourceCPU: q("10")}, corev1.ResourceList{corev1.ResourceCPU: q("9500m")}, "2", limitsSpot, 0, true},
		{"node limits exhausted", corev1.ResourceList{"nodes": q("3")}, corev1.ResourceList{"nodes": q("3")}, "", nodesSpot, 0, true},
		// The pool's own state does not back the Event: at most the
		// pod's workload (after Grace, see TestLimitsNeedTheState).
		{"exceed limits, room for its smallest node", corev1.ResourceList{corev1.ResourceCPU: q("10")}, corev1.ResourceList{corev1.ResourceCPU: q("8")}, "2", limitsSpot, 0, false},
		{"exceed limits, no node and no usage", corev1.ResourceList{corev1.ResourceCPU: q("10")}, nil, "", limitsSpot, 0, false},
		{"node limits with nodes left", corev1.ResourceList{"nodes": q("3")}, corev1.ResourceList{"nodes": q("2")}, "", nodesSpot, 0, false},
		{"limits of another pool", corev1.ResourceList{corev1.ResourceCPU: q("10")}, corev1.ResourceList{corev1.ResourceCPU: q("10")}, "", limitsGPU, 0, false},
		// Karpenter cannot have said it: not its Event.
		{"pool without limits", nil, corev1.ResourceList{corev1.ResourceCPU: q("10")}, "", limitsSpot, 0, false},
		// From before the pod was unschedulable (another round).
		{"Event older than the pod's wait", corev1.ResourceList{corev1.ResourceCPU: q("10")}, corev1.ResourceList{corev1.ResourceCPU: q("10")}, "", limitsSpot, -Grace - 2*time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np := nodePool("spot", metav1.ConditionTrue, allowing(spotType), func(np *karpv1.NodePool) {
				np.Spec.Limits = karpv1.Limits(tc.limits)
				np.Status.Resources = tc.used
			})
			objs := []client.Object{np, pendingPod("p1", "spot", now.Add(-Grace))}
			if tc.node != "" {
				objs = append(objs, launchedClaim("spot-a", corev1.ResourceList{corev1.ResourceCPU: q(tc.node)}))
			}
			f := newFixture(t, Options{}, nil, nil, objs...)
			if tc.message != "" {
				f.failedScheduling("p1", tc.message, now.Add(tc.at))
			}
			f.reconcile("p1")
			out, reason := f.out(capacity.PoolKey("spot"))
			if out != tc.want || (out && reason != ReasonLimits) {
				t.Fatalf("out %v reason %q; want out %v for limits", out, reason, tc.want)
			}
			if out, _ := f.out(capacity.Scoped("deploy-uid", capacity.PoolKey("spot"))); out {
				t.Error("marked for the workload within NominationWait")
			}
		})
	}
}

// launchedClaim is a NodeClaim of the spot pool that launched a node of
// instance type spotType and capacity.
func launchedClaim(name string, capacity corev1.ResourceList) *karpv1.NodeClaim {
	return typedClaim(name, "spot", spotType, capacity)
}

// TestLimitsWhileClaimOnTheWay: Karpenter counts launching NodeClaims in the
// pool's usage. A limits Event counts only when it is newer than the pool's
// newest NodeClaim on its way (an older one may predate the NodeClaim made
// for the pod); once the pool is out, a pod Karpenter nominated after its
// last failure, or whose failure predates the NodeClaim, is left to it.
func TestLimitsWhileClaimOnTheWay(t *testing.T) {
	q := resource.MustParse
	const exceed = "Failed to schedule pod, all available instance types exceed limits for nodepool (NodePool=spot)"
	np := nodePool("spot", metav1.ConditionTrue, func(np *karpv1.NodePool) {
		np.Spec.Limits = karpv1.Limits(corev1.ResourceList{corev1.ResourceCPU: q("4")})
		np.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: q("4")}
	})
	claim := nodeClaim("spot-a", "spot", now.Add(-20*time.Second), status.Condition{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue})
	at := now.Add(-30 * time.Second)
	f := newFixture(t, Options{}, nil, nil, np, claim, pendingPod("old-failure", "spot", at), pendingPod("nominated", "spot", at), pendingPod("p3", "spot", at))
	f.failedScheduling("old-failure", exceed, now.Add(-25*time.Second))
	f.nominated("nominated", now.Add(-20*time.Second))
	f.reconcile("old-failure")
	f.drain()
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked on a limits Event older than the NodeClaim on its way: %v", snap)
	}
	if _, ok := f.get("old-failure"); !ok {
		t.Fatal("pod deleted while its NodeClaim is on its way")
	}
	// Karpenter says it again, after the NodeClaim: the pool is at its limits.
	f.failedScheduling("p3", exceed, now.Add(-5*time.Second))
	f.reconcile("p3")
	if out, reason := f.out(capacity.PoolKey("spot")); !out || reason != ReasonLimits {
		t.Fatalf("out %v reason %q; want limits", out, reason)
	}
	f.drain()
	for name, want := range map[string]bool{"old-failure": true, "nominated": true, "p3": false} {
		if _, ok := f.get(name); ok != want {
			t.Errorf("%s exists %v, want %v", name, ok, want)
		}
	}
}

// TestLaunchFailure: a NodeClaim deleted before it registered (Karpenter on
// insufficient capacity) marks the pool for every workload once Karpenter
// had Grace to create another one; one it did create holds the signal back.
func TestLaunchFailure(t *testing.T) {
	spot := capacity.PoolKey("spot")
	failedClaim := nodeClaim("spot-x1", "spot", now.Add(-5*time.Second))
	failedClaim.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	for _, tc := range []struct {
		name      string
		since     time.Duration // the pod unschedulable since, from now
		nominated bool          // Karpenter nominated the pod to the failed NodeClaim
		onWay     bool
		claimAt   time.Duration // the replacement NodeClaim's age at the failure
	}{
		// The failure made the pod unschedulable again (no nomination
		// since): its wait starts with the failure.
		{name: "none on its way", since: 0},
		{name: "nominated to the failed NodeClaim", since: -20 * time.Second, nominated: true},
		{name: "replacement on its way", since: -20 * time.Second, onWay: true, claimAt: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{nodePool("spot", metav1.ConditionTrue), pendingPod("p1", "spot", now.Add(tc.since))}
			if tc.onWay {
				objs = append(objs, nodeClaim("spot-x2", "spot", now.Add(-tc.claimAt),
					status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue}))
			}
			f := newFixture(t, Options{}, nil, nil, objs...)
			if tc.nominated {
				f.nominated("p1", now.Add(-5*time.Second))
			}
			if !f.ctrl.observeClaim(failedClaim, false) {
				t.Fatal("deletion before registration not recorded as a failure")
			}
			if f.ctrl.observeClaim(failedClaim, true) {
				t.Error("the same NodeClaim's failure recorded twice")
			}
			res := f.reconcile("p1")
			if snap := f.tracker.Snapshot(); len(snap) != 0 {
				t.Fatalf("marked within Grace of the failure (Karpenter may still create another NodeClaim): %v", snap)
			}
			if !tc.onWay && res.RequeueAfter != Grace {
				t.Errorf("RequeueAfter %s, want Grace after the failure", res.RequeueAfter)
			}
			f.clock.Step(Grace)
			f.reconcile("p1")
			f.drain()
			out, reason := f.out(spot)
			if tc.onWay {
				if snap := f.tracker.Snapshot(); len(snap) != 0 {
					t.Fatalf("marked while a NodeClaim is on its way: %v", snap)
				}
				if _, ok := f.get("p1"); !ok {
					t.Fatal("pod deleted while a NodeClaim is on its way")
				}
				return
			}
			if !out || reason != ReasonLaunchFailed {
				t.Fatalf("out %v reason %q; want launch_failed", out, reason)
			}
			if evs := f.events(); len(evs) != 1 || !strings.Contains(evs[0], "cannot get capacity (launch_failed: a NodeClaim of the NodePool failed to launch 10s ago and none is on its way)") {
				t.Errorf("events %q", evs)
			}
			// A pod Karpenter nominated after its last scheduling failure
			// is left to Karpenter (awaitingNode); the others are deleted.
			if _, ok := f.get("p1"); ok != tc.nominated {
				t.Errorf("p1 exists %v, want %v", ok, tc.nominated)
			}
		})
	}
}

func TestLaunchedConditionFailure(t *testing.T) {
	failed := status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionUnknown, Reason: "LaunchFailed", Message: "no capacity",
		LastTransitionTime: metav1.NewTime(now.Add(-30 * time.Second))}
	awaiting := status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionUnknown, Reason: awaitingReason}
	falseCond := status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionFalse, Reason: "Whatever", LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}
	registered := status.Condition{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue}
	initialized := status.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue}
	for _, tc := range []struct {
		name   string
		conds  []status.Condition
		failed bool
	}{
		{"launch error", []status.Condition{failed}, true},
		{"launched false", []status.Condition{falseCond}, true},
		{"awaiting launch", []status.Condition{awaiting}, false},
		{"no condition yet", nil, false},
		// Registered but not initialised: the node cannot take pods yet,
		// so it is still on its way.
		{"registered", []status.Condition{registered}, false},
		{"initialized", []status.Condition{registered, initialized}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := nodeClaim("c", "spot", now.Add(-time.Minute), tc.conds...)
			if got, _ := launchFailed(nc); got != tc.failed {
				t.Fatalf("launchFailed %v, want %v", got, tc.failed)
			}
			if onWay := len(claimIndex(nc)) > 0; onWay != (!tc.failed && tc.name != "initialized") {
				t.Errorf("indexed as on its way: %v", onWay)
			}
		})
	}
	if awaitingReason == "" {
		t.Fatal("operatorpkg's initial reason not found")
	}
}

// TestTimeout: a pod Karpenter nominated (it keeps doing so) while no
// NodeClaim of its pool is on its way marks the pool for its workload only
// after the timeout; a NodeClaim on its way holds it until it is timeout
// old.
func TestTimeout(t *testing.T) {
	spot := capacity.PoolKey("spot")
	onWay := nodeClaim("spot-a", "spot", now.Add(-time.Minute))
	registeredClaim := nodeClaim("spot-b", "spot", now.Add(-time.Minute), status.Condition{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue},
		status.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue})
	otherPool := nodeClaim("od-a", "on-demand", now.Add(-time.Minute))
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue), onWay, registeredClaim, otherPool,
		pendingPod("p1", "spot", now.Add(-5*time.Minute)))
	f.nominated("p1", now.Add(-time.Minute))
	res := f.reconcile("p1")
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked while a NodeClaim of the pool is on its way: %v", snap)
	}
	if res.RequeueAfter != 2*time.Minute {
		t.Errorf("RequeueAfter %s, want when the NodeClaim turns 3m old", res.RequeueAfter)
	}
	// The slow NodeClaim is still not registered 3 minutes after its
	// creation; Karpenter nominates the pod to it again.
	f.clock.Step(2 * time.Minute)
	f.nominated("p1", now.Add(90*time.Second))
	f.reconcile("p1")
	if out, _ := f.out(spot); out {
		t.Fatal("a slow launch marked the pool for every workload")
	}
	if out, reason := f.out(capacity.Scoped("deploy-uid", spot)); !out || reason != ReasonTimeout {
		t.Fatalf("workload's key: out %v reason %q; want timeout", out, reason)
	}
	if evs := f.events(); len(evs) != 1 || !strings.Contains(evs[0], "NodePool spot gives this workload no capacity (timeout: pod p1 stayed unschedulable for 3m0s with no NodeClaim on its way)") {
		t.Errorf("events %q", evs)
	}
}

func TestTimeoutAfterClaimInitialized(t *testing.T) {
	scoped := capacity.Scoped("deploy-uid", capacity.PoolKey("spot"))
	claim := nodeClaim("spot-a", "spot", now.Add(-time.Minute))
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue), claim, pendingPod("p1", "spot", now.Add(-5*time.Minute)))
	f.nominated("p1", now.Add(-time.Minute))
	f.reconcile("p1")
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked while a NodeClaim is on its way: %v", snap)
	}
	// It registers: still on its way, the node is not ready for pods.
	claim.Status.Conditions = []status.Condition{{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue, Reason: "Registered", LastTransitionTime: metav1.NewTime(now)}}
	if err := f.client.Update(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	f.reconcile("p1")
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked while the NodeClaim is registered but not initialised: %v", snap)
	}
	// It is initialised, yet the pod is still unschedulable: the node went
	// to other pods.
	claim.Status.Conditions = append(claim.Status.Conditions, status.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue, Reason: "Initialized", LastTransitionTime: metav1.NewTime(now)})
	if err := f.client.Status().Update(context.Background(), claim); err != nil {
		if err := f.client.Update(context.Background(), claim); err != nil {
			t.Fatal(err)
		}
	}
	f.reconcile("p1")
	if out, reason := f.out(scoped); !out || reason != ReasonTimeout {
		t.Fatalf("out %v reason %q; want timeout for the workload", out, reason)
	}
	if out, _ := f.out(capacity.PoolKey("spot")); out {
		t.Fatal("marked for every workload")
	}
}

// TestNoDeletionWhileClaimOnTheWay: even while the key is out, a pod whose
// pool has a NodeClaim on its way is left alone.
func TestNoDeletionWhileClaimOnTheWay(t *testing.T) {
	spot := capacity.PoolKey("spot")
	claim := nodeClaim("spot-a", "spot", now.Add(-time.Minute))
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue), claim, pendingPod("p1", "spot", now.Add(-time.Minute)))
	f.tracker.Mark(spot, ReasonLimits)
	f.clock.Step(time.Minute)
	if res := f.reconcile("p1"); res.RequeueAfter != 2*time.Minute {
		t.Errorf("RequeueAfter %s, want the end of the outage in 2m", res.RequeueAfter)
	}
	f.drain()
	if _, ok := f.get("p1"); !ok {
		t.Fatal("pod deleted while a NodeClaim of its pool is on its way")
	}
	if f.limiter.waits != 0 {
		t.Errorf("%d limiter waits for no deletion", f.limiter.waits)
	}
	if err := f.client.Delete(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	f.reconcile("p1")
	f.drain()
	if _, ok := f.get("p1"); ok {
		t.Fatal("pod not deleted once no NodeClaim is on its way")
	}
}

// TestOnlyRecreatedPendingPodsDeleted: the pods of the key that a
// ReplicaSet or StatefulSet recreates are deleted; nothing else.
func TestOnlyRecreatedPendingPodsDeleted(t *testing.T) {
	at := now.Add(-time.Minute)
	bound := pendingPod("bound", "spot", at)
	bound.Spec.NodeName = "node-1"
	running := pendingPod("running", "spot", at)
	running.Status.Phase = corev1.PodRunning
	deleting := pendingPod("deleting", "spot", at)
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	deleting.Finalizers = []string{"test/keep"}
	undecided := pendingPod("undecided", "spot", at)
	delete(undecided.Annotations, annotations.Group)
	gated := pendingPod("gated", "spot", at)
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
	// Decision annotations a client wrote: no signature, or another pod's.
	unsigned := pendingPod("unsigned", "spot", at)
	delete(unsigned.Annotations, annotations.Signature)
	copied := pendingPod("copied", "spot", at)
	copied.Annotations[annotations.Signature] = pendingPod("trigger", "spot", at).Annotations[annotations.Signature]
	// Decided in shadow mode: what apportion would have done, signed, and
	// the pod itself left alone.
	shadow := pendingPod("shadow", "spot", at)
	decision.Strip(shadow)
	decision.WriteShadow(shadow, decision.Shadow{Group: spotGroup, NodePool: "spot", Signature: testSigner.SignShadow(shadow.UID, spotGroup, "spot")})
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionFalse), nodePool("on-demand", metav1.ConditionTrue),
		pendingPod("trigger", "spot", at),
		pendingPod("rs-pod", "spot", at),
		pendingPod("sts-pod", "spot", at, ownedBy("StatefulSet", "db", "sts-uid")),
		pendingPod("bare", "spot", at, func(p *corev1.Pod) { p.OwnerReferences = nil }),
		pendingPod("ds-pod", "spot", at, ownedBy("DaemonSet", "agent", "ds-uid")),
		pendingPod("job-pod", "spot", at, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "job-uid", Controller: ptr.To(true)}}
		}),
		pendingPod("not-controller", "spot", at, func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }),
		pendingPod("other-pool", "on-demand", at),
		bound, running, deleting, undecided, gated, unsigned, copied, shadow,
	)
	f.reconcile("trigger")
	f.drain()
	for name, want := range map[string]bool{
		"trigger": false, "rs-pod": false, "sts-pod": false,
		"bare": true, "ds-pod": true, "job-pod": true, "not-controller": true, "other-pool": true,
		"bound": true, "running": true, "deleting": true, "undecided": true, "gated": true,
		"unsigned": true, "copied": true, "shadow": true,
	} {
		if _, ok := f.get(name); ok != want {
			t.Errorf("%s: exists %v, want %v", name, ok, want)
		}
	}
	if f.limiter.waits != 3 {
		t.Errorf("%d limiter waits, want one per deletion (3)", f.limiter.waits)
	}
	// Reconciling the ones left changes nothing (Karpenter is bringing
	// other-pool's pod a node).
	f.nominated("other-pool", now)
	for _, name := range []string{"bare", "ds-pod", "other-pool", "running", "unsigned", "copied", "shadow"} {
		f.reconcile(name)
	}
	f.drain()
	for _, name := range []string{"bare", "ds-pod", "other-pool", "running", "unsigned", "copied", "shadow"} {
		if _, ok := f.get(name); !ok {
			t.Errorf("%s deleted on a later pass", name)
		}
	}
}

// TestDeletePreconditions: the deletion carries the pod's UID and resource
// version, so a pod bound after the cache read is not deleted.
func TestDeletePreconditions(t *testing.T) {
	var seen []client.DeleteOptions
	bindFirst := false
	funcs := &interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		var o client.DeleteOptions
		o.ApplyOptions(opts)
		seen = append(seen, o)
		if bindFirst {
			// The scheduler binds the pod between the cache read and the
			// deletion.
			var p corev1.Pod
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &p); err != nil {
				return err
			}
			p.Spec.NodeName = "node-1"
			if err := c.Update(ctx, &p); err != nil {
				return err
			}
		}
		return c.Delete(ctx, obj, opts...)
	}}
	f := newFixture(t, Options{}, funcs, nil, nodePool("spot", metav1.ConditionFalse), pendingPod("p1", "spot", now.Add(-time.Minute)), pendingPod("p2", "spot", now.Add(-time.Minute)))
	p1, _ := f.get("p1")
	f.reconcile("p1")
	f.drainOne()
	if len(seen) != 1 || seen[0].Preconditions == nil || seen[0].Preconditions.UID == nil || *seen[0].Preconditions.UID != p1.UID ||
		seen[0].Preconditions.ResourceVersion == nil || *seen[0].Preconditions.ResourceVersion != p1.ResourceVersion {
		t.Fatalf("delete options %+v; want UID %s and resourceVersion %s preconditions", seen, p1.UID, p1.ResourceVersion)
	}
	bindFirst = true
	deleted := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultDeleted))
	f.drain()
	p2, ok := f.get("p2")
	if !ok || p2.Spec.NodeName != "node-1" {
		t.Fatal("a pod bound after the cache read was deleted")
	}
	if got := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultDeleted)) - deleted; got != 0 {
		t.Errorf("refused deletion counted: %v", got)
	}
}

func TestWorkloadTimeout(t *testing.T) {
	scoped := capacity.Scoped("deploy-uid", capacity.PoolKey("spot"))
	f := newFixture(t, Options{}, nil, map[string]string{annotations.CapacityTimeout: "1m"},
		nodePool("spot", metav1.ConditionTrue), pendingPod("p1", "spot", now.Add(-50*time.Second)))
	f.nominated("p1", now.Add(-20*time.Second))
	if res := f.reconcile("p1"); res.RequeueAfter != 10*time.Second {
		t.Errorf("RequeueAfter %s, want the 10s left of the workload's 1m", res.RequeueAfter)
	}
	f.clock.Step(10 * time.Second)
	f.reconcile("p1")
	if out, reason := f.out(scoped); !out || reason != ReasonTimeout {
		t.Fatalf("after the workload's timeout: out %v reason %q", out, reason)
	}
	evs := f.events()
	if len(evs) != 1 || !strings.Contains(evs[0], "unschedulable for 1m0s") {
		t.Errorf("events %q", evs)
	}
}

func TestPodTemplateTimeoutWins(t *testing.T) {
	f := newFixture(t, Options{Timeout: time.Hour}, nil, map[string]string{annotations.CapacityTimeout: "1h"},
		nodePool("spot", metav1.ConditionTrue), pendingPod("p1", "spot", now.Add(-2*time.Minute), withAnnotation(annotations.CapacityTimeout, "90s")))
	f.nominated("p1", now.Add(-30*time.Second))
	f.reconcile("p1")
	if out, reason := f.out(capacity.Scoped("deploy-uid", capacity.PoolKey("spot"))); !out || reason != ReasonTimeout {
		t.Fatalf("the pod template's 90s not applied: out %v reason %q", out, reason)
	}
}

func TestInvalidTimeoutAnnotation(t *testing.T) {
	scoped := capacity.Scoped("deploy-uid", capacity.PoolKey("spot"))
	f := newFixture(t, Options{}, nil, map[string]string{annotations.CapacityTimeout: "soon"},
		nodePool("spot", metav1.ConditionTrue), pendingPod("p1", "spot", now.Add(-2*time.Minute)), pendingPod("p2", "spot", now.Add(-2*time.Minute)))
	f.nominated("p1", now)
	f.nominated("p2", now)
	if res := f.reconcile("p1"); res.RequeueAfter != time.Minute {
		t.Errorf("RequeueAfter %s, want the default's 1m left", res.RequeueAfter)
	}
	f.reconcile("p2")
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked before the default timeout: %v", snap)
	}
	evs := f.events()
	if len(evs) != 1 || !strings.HasPrefix(evs[0], `Warning InvalidCapacityTimeout apportion.dev/capacity-timeout "soon" is not a positive duration`) ||
		!strings.HasSuffix(evs[0], "using 3m0s") {
		t.Fatalf("events %q; want one InvalidCapacityTimeout", evs)
	}
	f.clock.Step(time.Minute)
	f.reconcile("p1")
	if out, _ := f.out(scoped); !out {
		t.Fatal("not marked after the default timeout")
	}
	for _, bad := range []string{"-1m", "0s", "5"} {
		if d := f.ctrl.timeoutFor(pendingPod("x", "spot", now, withAnnotation(annotations.CapacityTimeout, bad)), nil, &corev1.ObjectReference{UID: "x"}); d != DefaultTimeout {
			t.Errorf("%q gives %s, want the default", bad, d)
		}
	}
}

// TestNodeLabelMode: without Karpenter only the timeout applies, and it
// marks the group's label set for the workload of the pod.
func TestNodeLabelMode(t *testing.T) {
	group := "kubernetes.io/arch=arm64"
	key := capacity.LabelsKey(group)
	scoped := capacity.Scoped("deploy-uid", key)
	mk := func(name string, at time.Time, opts ...podOpt) *corev1.Pod {
		p := pendingPod(name, "", at, opts...)
		delete(p.Annotations, annotations.NodePool)
		p.Annotations[annotations.Group] = group
		return sign(p)
	}
	other := mk("other-group", now.Add(-time.Hour))
	other.Annotations[annotations.Group] = "kubernetes.io/arch=amd64"
	sign(other)
	bare := mk("bare", now.Add(-time.Minute), func(p *corev1.Pod) { p.OwnerReferences = nil })
	f := newFixture(t, Options{NodeLabels: true}, nil, nil, mk("p1", now.Add(-2*time.Minute)), mk("p2", now), bare, other)
	if res := f.reconcile("p1"); res.RequeueAfter != time.Minute {
		t.Errorf("RequeueAfter %s, want 1m", res.RequeueAfter)
	}
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked before the timeout: %v", snap)
	}
	f.clock.Step(time.Minute)
	f.reconcile("p1")
	if out, reason := f.out(scoped); !out || reason != ReasonTimeout {
		t.Fatalf("out %v reason %q; want timeout for the workload", out, reason)
	}
	if out, _ := f.out(key); out {
		t.Fatal("a workload's wait marked the label set for every workload")
	}
	f.drain()
	for name, want := range map[string]bool{"p1": false, "p2": false, "bare": true, "other-group": true} {
		if _, ok := f.get(name); ok != want {
			t.Errorf("%s exists %v, want %v", name, ok, want)
		}
	}
	if evs := f.events(); len(evs) != 1 || !strings.Contains(evs[0], "node labels "+group+" gives this workload no capacity (timeout: pod p1 stayed unschedulable for 3m0s)") {
		t.Errorf("events %q", evs)
	}
}

// TestOldEvidenceAfterOutage: when an outage ends, a pod that stayed stuck
// (a bare pod is never deleted) does not mark the key again at once: its
// Karpenter Event from before is not counted again, its wait counts from
// the end of the outage, and the next outage is longer.
func TestOldEvidenceAfterOutage(t *testing.T) {
	scoped := capacity.Scoped("bare-uid", capacity.PoolKey("spot"))
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue),
		pendingPod("bare", "spot", now.Add(-3*time.Minute), func(p *corev1.Pod) { p.OwnerReferences = nil }))
	f.failedScheduling("bare", "Failed to schedule pod, no instance type has the required offering, requirements=karpenter.sh/nodepool In [spot], resources={\"cpu\":\"1\"}", now.Add(-time.Minute))
	f.reconcile("bare")
	out, reason, until := f.tracker.Unavailable(scoped)
	if !out || reason != ReasonNoOffering {
		t.Fatalf("out %v reason %q; want no_offering for the bare pod (its own scope)", out, reason)
	}
	f.clock.SetTime(until)
	// Karpenter fails it again once it is back (about other pools only).
	f.failedScheduling("bare", "Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [on-demand]", until.Add(time.Second))
	if res := f.reconcile("bare"); res.RequeueAfter != DefaultNominationWait {
		t.Errorf("right after the outage: RequeueAfter %s, want NominationWait", res.RequeueAfter)
	}
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked again from evidence of the last outage: %v", snap)
	}
	f.clock.Step(DefaultNominationWait)
	f.reconcile("bare")
	out, reason, until2 := f.tracker.Unavailable(scoped)
	if !out || reason != ReasonNoNodeClaim {
		t.Fatalf("out %v reason %q; want no_nodeclaim", out, reason)
	}
	if got := until2.Sub(f.clock.Now()); got != 6*time.Minute {
		t.Errorf("second outage lasts %s, want 6m", got)
	}
}

func TestDefaultLimiter(t *testing.T) {
	c := NewController(clocktesting.NewFakeClock(now), nil, nil, capacity.NewTracker(clocktesting.NewFakeClock(now), time.Minute, time.Hour), Options{DeleteQPS: DefaultDeleteQPS})
	l, ok := c.limiter.(*rate.Limiter)
	if !ok || l.Limit() != DefaultDeleteQPS || l.Burst() != DeleteBurst {
		t.Fatalf("limiter %#v; want rate %v burst %d", c.limiter, DefaultDeleteQPS, DeleteBurst)
	}
	c = NewController(clocktesting.NewFakeClock(now), nil, nil, nil, Options{DeleteQPS: 0.5})
	if l := c.limiter.(*rate.Limiter); l.Limit() != 0.5 {
		t.Errorf("limit %v, want 0.5", l.Limit())
	}
	if c.opts.Timeout != DefaultTimeout {
		t.Errorf("timeout %s, want the default", c.opts.Timeout)
	}
	if c.opts.NominationWait != DefaultNominationWait {
		t.Errorf("nomination wait %s, want the default", c.opts.NominationWait)
	}
	// Without a Signer no decision verifies but this process's own.
	if c.opts.Signer == nil || c.opts.Signer.Verify(pendingPod("p", "spot", now)) == nil {
		t.Error("no Signer, or the default one verifies another key's decisions")
	}
}

// TestBlockingLimiter: the deleter waits on the limiter before each
// deletion and stops when its context ends.
func TestBlockingLimiter(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionFalse), pendingPod("p1", "spot", now.Add(-time.Minute)))
	f.ctrl.limiter = rate.NewLimiter(0, 0) // never a token
	f.reconcile("p1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = f.ctrl.reconcileDeletion(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: "p1"}})
	}()
	cancel()
	<-done
	if _, ok := f.get("p1"); !ok {
		t.Fatal("deleted without a token from the limiter")
	}
}

func TestNodeClaimHandler(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue),
		pendingPod("p1", "spot", now), pendingPod("p2", "spot", now), pendingPod("od", "on-demand", now))
	h := f.ctrl.nodeClaimHandler()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx := context.Background()

	fresh := nodeClaim("spot-a", "spot", now)
	h.Create(ctx, event.CreateEvent{Object: fresh}, q)
	if q.Len() != 0 {
		t.Errorf("a NodeClaim on its way enqueued %d pods", q.Len())
	}
	deleting := fresh.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	h.Update(ctx, event.UpdateEvent{ObjectOld: fresh, ObjectNew: deleting}, q)
	if q.Len() != 2 {
		t.Errorf("a failed NodeClaim enqueued %d pods, want the 2 of its pool", q.Len())
	}
	if _, ok := f.ctrl.failure("spot"); !ok {
		t.Error("failure not recorded")
	}
	h.Delete(ctx, event.DeleteEvent{Object: deleting}, q)
	f.ctrl.mu.Lock()
	left := len(f.ctrl.failedClaims)
	f.ctrl.mu.Unlock()
	if left != 0 {
		t.Errorf("%d NodeClaims remembered after their deletion", left)
	}
	// A registered NodeClaim's deletion (consolidation) is no failure.
	g := newFixture(t, Options{}, nil, nil)
	reg := nodeClaim("spot-b", "spot", now, status.Condition{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue})
	g.ctrl.nodeClaimHandler().Delete(ctx, event.DeleteEvent{Object: reg}, q)
	if _, ok := g.ctrl.failure("spot"); ok {
		t.Error("a registered NodeClaim's deletion recorded as a launch failure")
	}
}

func TestNodePoolHandler(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, pendingPod("p1", "spot", now), pendingPod("od", "on-demand", now))
	h := f.ctrl.nodePoolHandler()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx := context.Background()
	ready, notReady := nodePool("spot", metav1.ConditionTrue), nodePool("spot", metav1.ConditionFalse)
	h.Update(ctx, event.UpdateEvent{ObjectOld: ready, ObjectNew: ready}, q)
	if q.Len() != 0 {
		t.Errorf("a Ready NodePool's update enqueued %d pods", q.Len())
	}
	h.Update(ctx, event.UpdateEvent{ObjectOld: ready, ObjectNew: notReady}, q)
	if q.Len() != 1 {
		t.Errorf("a NodePool turning not Ready enqueued %d pods, want 1", q.Len())
	}
}

// TestDeletionQueue: a pod queued again before its turn is in the deletion
// controller's workqueue once, after the pods queued before it.
func TestDeletionQueue(t *testing.T) {
	c := NewController(clocktesting.NewFakeClock(now), nil, nil, capacity.NewTracker(clocktesting.NewFakeClock(now), time.Minute, time.Hour), Options{DeleteQPS: 1})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.deletionSource().Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name}}
	}
	c.queue(pod("a"))
	c.queue(pod("b"))
	c.queue(pod("a"))
	// The source hands the events over asynchronously.
	deadline := time.Now().Add(10 * time.Second)
	for (len(c.deletions) > 0 || q.Len() < 2) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if q.Len() != 2 {
		t.Fatalf("%d queued, want 2 (a once, b)", q.Len())
	}
	for _, want := range []string{"a", "b"} {
		req, _ := q.Get()
		if req.Name != want {
			t.Errorf("got %s, want %s", req.Name, want)
		}
		q.Done(req)
	}
}

// TestDeletionErrorIsReturned: a deletion the API refuses for another
// reason than not-found or conflict is returned, for the workqueue to retry
// with its backoff.
func TestDeletionErrorIsReturned(t *testing.T) {
	refused := apierrors.NewServiceUnavailable("etcd down")
	f := newFixture(t, Options{}, &interceptor.Funcs{Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
		return refused
	}}, nil, nodePool("spot", metav1.ConditionFalse), pendingPod("p1", "spot", now.Add(-time.Minute)))
	f.reconcile("p1")
	_, err := f.ctrl.reconcileDeletion(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: "p1"}})
	if !errors.Is(err, refused) {
		t.Fatalf("error %v, want the API's", err)
	}
}

// TestDeleterChecksAgain: the deleter re-checks each queued pod, whatever
// queued it.
func TestDeleterChecksAgain(t *testing.T) {
	spot := capacity.PoolKey("spot")
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue), nodePool("on-demand", metav1.ConditionTrue),
		pendingPod("bare", "spot", now, func(p *corev1.Pod) { p.OwnerReferences = nil }),
		pendingPod("ds-pod", "spot", now, ownedBy("DaemonSet", "agent", "ds-uid")),
		pendingPod("available", "on-demand", now))
	f.tracker.Mark(spot, ReasonTimeout)
	for _, name := range []string{"bare", "ds-pod", "available", "missing"} {
		f.enqueue(types.NamespacedName{Namespace: "web", Name: name})
	}
	f.drain()
	for _, name := range []string{"bare", "ds-pod", "available"} {
		if _, ok := f.get(name); !ok {
			t.Errorf("%s deleted", name)
		}
	}
	if f.limiter.waits != 0 {
		t.Errorf("%d limiter waits for pods that are not deleted", f.limiter.waits)
	}
}

// TestZeroQPSDeletesNone: --capacity-delete-qps 0 marks keys but deletes no
// pod.
func TestZeroQPSDeletesNone(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionFalse), pendingPod("p1", "spot", now.Add(-time.Minute)))
	f.ctrl = NewController(f.clock, f.client, f.rec, f.tracker, Options{DeleteQPS: 0, Signer: testSigner})
	f.ctrl.limiter = f.limiter
	f.reconcile("p1")
	if out, _ := f.out(capacity.PoolKey("spot")); !out {
		t.Fatal("not marked")
	}
	f.reconcile("p1")
	f.enqueue(types.NamespacedName{Namespace: "web", Name: "p1"})
	f.drain()
	if _, ok := f.get("p1"); !ok {
		t.Fatal("deleted with DeleteQPS 0")
	}
}

// TestRegister: the indexes and watches are accepted by a manager, in both
// modes (nothing is started: no API server is needed).
func TestRegister(t *testing.T) {
	for _, nodeLabels := range []bool{false, true} {
		m := test.UnstartedManager(t, []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Pod")},
			schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodeClaim"},
			schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodePool"})
		c := NewController(clocktesting.NewFakeClock(now), m.GetClient(), events.NewFakeRecorder(1),
			capacity.NewTracker(clocktesting.NewFakeClock(now), time.Minute, time.Hour), Options{NodeLabels: nodeLabels, DeleteQPS: 2})
		if err := c.Register(context.Background(), m); err != nil {
			t.Fatalf("node labels %v: %v", nodeLabels, err)
		}
	}
}

// TestFullQueueComesBackSoon: a pod the full deletion queue did not take is
// reconciled again after queueFullRetry, not only when the outage ends.
func TestFullQueueComesBackSoon(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionFalse), pendingPod("p1", "spot", now.Add(-time.Minute)))
	f.ctrl.deletions = make(chan event.TypedGenericEvent[*corev1.Pod]) // no room
	if res := f.reconcile("p1"); res.RequeueAfter != queueFullRetry {
		t.Fatalf("RequeueAfter %s with a full queue, want %s", res.RequeueAfter, queueFullRetry)
	}
	f.ctrl.deletions = make(chan event.TypedGenericEvent[*corev1.Pod], 1)
	if res := f.reconcile("p1"); res.RequeueAfter == queueFullRetry {
		t.Fatal("queued, yet back as if the queue were full")
	}
	if q := f.queued(); len(q) != 1 || q[0].Name != "p1" {
		t.Fatalf("queued %v, want p1", q)
	}
}
