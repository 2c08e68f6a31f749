package fallback

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

// recorded is one Event a refRecorder got.
type recorded struct {
	regarding corev1.ObjectReference
	eventtype string
	reason    string
	note      string
}

// refRecorder keeps the object each Event is about (events.FakeRecorder
// drops it).
type refRecorder struct {
	mu     sync.Mutex
	events []recorded
}

func (r *refRecorder) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, _ string, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ref corev1.ObjectReference
	if p, ok := regarding.(*corev1.ObjectReference); ok {
		ref = *p
	}
	r.events = append(r.events, recorded{regarding: ref, eventtype: eventtype, reason: reason, note: fmt.Sprintf(note, args...)})
}

func (r *refRecorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// withRequests gives the pod one container asking for requests.
func withRequests(requests corev1.ResourceList) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "nginx", Resources: corev1.ResourceRequirements{Requests: requests}}}
	}
}

const exceedSpot = "Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [on-demand]; " +
	"key karpenter.sh/capacity-type, karpenter.sh/capacity-type In [spot] not in karpenter.sh/capacity-type In [on-demand]; " +
	"all available instance types exceed limits for nodepool (NodePool=spot)"

// TestLimitsWithHeadroom: Karpenter filters the pool's instance types by
// what is left of its limits before it looks at the pod, so the pool is out
// for every workload while its usage is below its limits; the Event names
// what is left (and what the pod needs, when the API reader gives it).
func TestLimitsWithHeadroom(t *testing.T) {
	q := resource.MustParse
	for _, tc := range []struct {
		name      string
		apiReader bool
		claimCPU  string // capacity of the pool's (initialised) NodeClaim, if any
		want      []string
	}{
		{"requests known", true, "", []string{"cpu 500m of 10 left (the pod needs 2)", "memory 44Gi of 64Gi left"}},
		{"requests not known", false, "", []string{"cpu 500m of 10 left", "memory 44Gi of 64Gi left"}},
		// Its NodeClaims hold more than its status shows yet.
		{"NodeClaims ahead of the status", true, "9800m", []string{"cpu 200m of 10 left (the pod needs 2)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spot := capacity.PoolKey("spot")
			np := nodePool("spot", metav1.ConditionTrue, allowing(spotType), func(np *karpv1.NodePool) {
				np.Spec.Limits = karpv1.Limits(corev1.ResourceList{corev1.ResourceCPU: q("10"), corev1.ResourceMemory: q("64Gi")})
				np.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: q("9500m"), corev1.ResourceMemory: q("20Gi")}
			})
			other := pendingPod("other", "spot", now.Add(-time.Second), ownedBy("StatefulSet", "db", "sts-uid"))
			objs := []client.Object{np, other, pendingPod("p1", "spot", now.Add(-5*time.Second), withRequests(corev1.ResourceList{corev1.ResourceCPU: q("2")}))}
			if tc.claimCPU == "" {
				// A node of the pool, launched: 500m left is less.
				objs = append(objs, launchedClaim("spot-old", corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi")}))
			} else {
				nc := nodeClaim("spot-a", "spot", now.Add(-time.Hour),
					status.Condition{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue},
					status.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue})
				nc.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: q(tc.claimCPU)}
				// The pool's instance type, launched by another pool.
				objs = append(objs, nc, typedClaim("od-a", "on-demand", spotType, corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi")}))
			}
			f := newFixture(t, Options{}, nil, nil, objs...)
			if tc.apiReader {
				f.ctrl.opts.APIReader = f.client
			}
			before := testutil.ToFloat64(metrics.CapacityUnavailableTotal.WithLabelValues(capacity.KindNodePool, "cluster", ReasonLimits))
			f.failedScheduling("p1", exceedSpot, now)
			f.reconcile("p1")
			if out, reason := f.out(spot); !out || reason != ReasonLimits {
				t.Fatalf("out %v reason %q; want limits for every workload", out, reason)
			}
			if got := testutil.ToFloat64(metrics.CapacityUnavailableTotal.WithLabelValues(capacity.KindNodePool, "cluster", ReasonLimits)) - before; got != 1 {
				t.Errorf("unavailable_total{cluster,limits} grew by %v, want 1", got)
			}
			evs := f.events()
			if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning CapacityUnavailable NodePool spot cannot get capacity (limits: ") ||
				!strings.Contains(evs[0], "Karpenter: all available instance types exceed limits for nodepool (NodePool=spot)") {
				t.Fatalf("events %q", evs)
			}
			for _, w := range tc.want {
				if !strings.Contains(evs[0], w) {
					t.Errorf("event %q does not name the headroom %q", evs[0], w)
				}
			}
			if !tc.apiReader && strings.Contains(evs[0], "the pod needs") {
				t.Errorf("event %q names requests it cannot know", evs[0])
			}
			// The pool is out for every workload: the StatefulSet's pending
			// pod goes too.
			f.drain()
			for _, name := range []string{"p1", "other"} {
				if _, ok := f.get(name); ok {
					t.Errorf("%s not deleted", name)
				}
			}
		})
	}
}

// TestPodDoesNotFit: Karpenter says no instance type of the pool fits the
// pod (its own requests): a Warning Event PodDoesNotFit on its workload,
// once; nothing marked, nothing deleted.
func TestPodDoesNotFit(t *testing.T) {
	const msg = "Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [on-demand]; " +
		`no instance type has enough resources, requirements=karpenter.sh/capacity-type In [spot], karpenter.sh/nodepool In [spot], resources={"cpu":"900","pods":"1"}`
	for _, tc := range []struct {
		name    string
		message string
		misfit  bool
	}{
		{"not enough resources", msg, true},
		{"requirements", "Failed to schedule pod, no instance type met all requirements, requirements=karpenter.sh/nodepool In [spot], topology.kubernetes.io/zone In [mars-1a], resources={}", true},
		// Offering only: the pool, not the pod (for this workload).
		{"offering", "Failed to schedule pod, no instance type has the required offering, requirements=karpenter.sh/nodepool In [spot], resources={}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &refRecorder{}
			f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue),
				pendingPod("p1", "spot", now.Add(-time.Minute), withRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("900")})))
			f.ctrl.recorder = apevents.NewRecorder(rec)
			f.failedScheduling("p1", tc.message, now.Add(-30*time.Second))
			res := f.reconcile("p1")
			f.drain()
			evs := rec.take()
			if !tc.misfit {
				if out, reason := f.out(capacity.Scoped("deploy-uid", capacity.PoolKey("spot"))); !out || reason != ReasonNoOffering {
					t.Fatalf("offering only: out %v reason %q; want no_offering for the workload", out, reason)
				}
				if out, _ := f.out(capacity.PoolKey("spot")); out {
					t.Fatal("no offering for one workload marked the pool for every workload")
				}
				if len(evs) != 1 || evs[0].reason != "CapacityUnavailable" || !strings.Contains(evs[0].note, "(no_offering: Karpenter: no instance type has the required offering") {
					t.Errorf("events %+v", evs)
				}
				return
			}
			if snap := f.tracker.Snapshot(); len(snap) != 0 {
				t.Fatalf("marked for a pod that fits no instance type: %v", snap)
			}
			if res.RequeueAfter != 0 {
				t.Errorf("RequeueAfter %s; Karpenter's next Event brings it back", res.RequeueAfter)
			}
			if _, ok := f.get("p1"); !ok {
				t.Fatal("a pod that fits no instance type was deleted")
			}
			want := corev1.ObjectReference{Kind: "Deployment", Namespace: "web", Name: "nginx", UID: "deploy-uid"}
			if len(evs) != 1 || evs[0].reason != "PodDoesNotFit" || evs[0].eventtype != corev1.EventTypeWarning || evs[0].regarding != want ||
				!strings.Contains(evs[0].note, "Karpenter finds no instance type of NodePool spot for pod p1") {
				t.Fatalf("events %+v; want one PodDoesNotFit on the Deployment", evs)
			}
			// Again (Karpenter repeats itself): no second Event.
			f.clock.Step(time.Minute)
			f.failedScheduling("p1", tc.message, now.Add(time.Minute))
			f.reconcile("p1")
			if evs := rec.take(); len(evs) != 0 {
				t.Errorf("second Event %+v", evs)
			}
			if snap := f.tracker.Snapshot(); len(snap) != 0 {
				t.Fatalf("marked on the second pass: %v", snap)
			}
		})
	}
}

// TestNoNodeClaim: a pod unschedulable for NominationWait that Karpenter
// nominated to nothing, with no NodeClaim of its pool on its way, marks the
// pool for its workload (not before); a Nominated Event since it became
// unschedulable, or a NodeClaim on its way, holds it back.
func TestNoNodeClaim(t *testing.T) {
	spot := capacity.PoolKey("spot")
	scoped := capacity.Scoped("deploy-uid", spot)
	for _, tc := range []struct {
		name      string
		wait      time.Duration // Options.NominationWait
		nominated time.Duration // Nominated Event, from now (0: none)
		claim     time.Duration // a NodeClaim on its way created, from now (0: none)
		fires     time.Duration // when it fires, from now (0: not within the timeout)
		silent    bool          // no FailedScheduling Event for the pod
	}{
		{name: "after NominationWait", fires: 7 * time.Second},
		{name: "a longer NominationWait", wait: 30 * time.Second, fires: 25 * time.Second},
		{name: "nominated", nominated: -3 * time.Second},
		// A nomination from before the pod was unschedulable again.
		{name: "stale nomination", nominated: -10 * time.Second, fires: 7 * time.Second},
		{name: "NodeClaim on its way", claim: -3 * time.Second},
		// Karpenter said nothing about the pod: only the timeout.
		{name: "no Karpenter failure", silent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{nodePool("spot", metav1.ConditionTrue), pendingPod("p1", "spot", now.Add(-5*time.Second))}
			if tc.claim != 0 {
				objs = append(objs, nodeClaim("spot-a", "spot", now.Add(tc.claim)))
			}
			f := newFixture(t, Options{NominationWait: tc.wait}, nil, nil, objs...)
			// Karpenter looked and found the pod no place (a message
			// about other pools only).
			if !tc.silent {
				f.failedScheduling("p1", "Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [on-demand]", now.Add(-4*time.Second))
			}
			if tc.nominated != 0 {
				f.nominated("p1", now.Add(tc.nominated))
			}
			before := testutil.ToFloat64(metrics.CapacityUnavailableTotal.WithLabelValues(capacity.KindNodePool, "workload", ReasonNoNodeClaim))
			res := f.reconcile("p1")
			if snap := f.tracker.Snapshot(); len(snap) != 0 {
				t.Fatalf("marked after 5s: %v", snap)
			}
			if tc.fires == 0 {
				// Held back: look again at the timeout (or when the
				// NodeClaim turns timeout old).
				want := 3*time.Minute - 5*time.Second
				if tc.claim != 0 {
					want = 3*time.Minute + tc.claim
				}
				if res.RequeueAfter != want {
					t.Errorf("RequeueAfter %s, want %s", res.RequeueAfter, want)
				}
				f.clock.Step(time.Minute)
				f.reconcile("p1")
				if snap := f.tracker.Snapshot(); len(snap) != 0 {
					t.Fatalf("marked: %v", snap)
				}
				return
			}
			if res.RequeueAfter != tc.fires {
				t.Errorf("RequeueAfter %s, want the rest of NominationWait %s", res.RequeueAfter, tc.fires)
			}
			f.clock.Step(tc.fires - time.Millisecond)
			f.reconcile("p1")
			if snap := f.tracker.Snapshot(); len(snap) != 0 {
				t.Fatalf("marked before NominationWait: %v", snap)
			}
			f.clock.Step(time.Millisecond)
			f.reconcile("p1")
			if out, reason := f.out(scoped); !out || reason != ReasonNoNodeClaim {
				t.Fatalf("workload's key: out %v reason %q; want no_nodeclaim", out, reason)
			}
			if out, _ := f.out(spot); out {
				t.Fatal("one workload's wait marked the pool for every workload")
			}
			if got := testutil.ToFloat64(metrics.CapacityUnavailableTotal.WithLabelValues(capacity.KindNodePool, "workload", ReasonNoNodeClaim)) - before; got != 1 {
				t.Errorf("unavailable_total{workload,no_nodeclaim} grew by %v, want 1", got)
			}
			if got := testutil.ToFloat64(metrics.CapacityUnavailable.WithLabelValues(capacity.KindNodePool, "workload")); got != 1 {
				t.Errorf("unavailable gauge (workload) %v, want 1", got)
			}
			if evs := f.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning CapacityUnavailable NodePool spot gives this workload no capacity (no_nodeclaim: pod p1 stayed unschedulable for ") {
				t.Errorf("events %q", evs)
			}
			if tc.nominated != 0 {
				// The deleter still takes the stale nomination for
				// Karpenter bringing the pod a node (awaitingNode does not
				// compare it with the pod's wait).
				return
			}
			f.drain()
			if _, ok := f.get("p1"); ok {
				t.Error("stuck pod not deleted")
			}
		})
	}
}

// TestTimeoutFloor: apportion.dev/capacity-timeout is tenant input: below
// MinTimeout it is raised to it, with a Warning Event.
func TestTimeoutFloor(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil)
	for _, tc := range []struct {
		raw  string
		want time.Duration
		warn bool
	}{
		{"1s", MinTimeout, true},
		{"29s", MinTimeout, true},
		{"1ns", MinTimeout, true},
		{"30s", MinTimeout, false},
		{" 45s ", 45 * time.Second, false},
		{"2m", 2 * time.Minute, false},
	} {
		ref := &corev1.ObjectReference{Kind: "Deployment", Namespace: "web", Name: "nginx", UID: types.UID("uid-" + tc.raw)}
		pod := pendingPod("x", "spot", now, withAnnotation(annotations.CapacityTimeout, tc.raw))
		if got := f.ctrl.timeoutFor(pod, nil, ref); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.raw, got, tc.want)
		}
		evs := f.events()
		if !tc.warn {
			if len(evs) != 0 {
				t.Errorf("%q: events %q", tc.raw, evs)
			}
			continue
		}
		want := `Warning InvalidCapacityTimeout apportion.dev/capacity-timeout "` + tc.raw + `" is below the 30s floor; using 30s`
		if len(evs) != 1 || evs[0] != want {
			t.Errorf("%q: events %q, want %q", tc.raw, evs, want)
		}
	}
}

// TestTimeoutFloorApplied: a workload asking for 1s waits 30s.
func TestTimeoutFloorApplied(t *testing.T) {
	scoped := capacity.Scoped("deploy-uid", capacity.PoolKey("spot"))
	f := newFixture(t, Options{}, nil, map[string]string{annotations.CapacityTimeout: "1s"},
		nodePool("spot", metav1.ConditionTrue), pendingPod("p1", "spot", now.Add(-10*time.Second)))
	f.nominated("p1", now.Add(-5*time.Second))
	if res := f.reconcile("p1"); res.RequeueAfter != 20*time.Second {
		t.Errorf("RequeueAfter %s, want the 20s left of 30s", res.RequeueAfter)
	}
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked after 10s with a 1s timeout: %v", snap)
	}
	if evs := f.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], `Warning InvalidCapacityTimeout apportion.dev/capacity-timeout "1s" is below the 30s floor`) {
		t.Errorf("events %q", evs)
	}
	f.clock.Step(20 * time.Second)
	f.reconcile("p1")
	if out, reason := f.out(scoped); !out || reason != ReasonTimeout {
		t.Fatalf("after 30s: out %v reason %q; want timeout", out, reason)
	}
	if evs := f.events(); len(evs) != 1 || !strings.Contains(evs[0], "(timeout: pod p1 stayed unschedulable for 30s") {
		t.Errorf("events %q (the warning is not repeated)", evs)
	}
}

// TestNoCompatibleInstanceTypes: Karpenter's Event on the NodePool, which
// its state backs (its requirements leave no instance type), marks it for
// every workload while it is fresh.
func TestNoCompatibleInstanceTypes(t *testing.T) {
	spot := capacity.PoolKey("spot")
	np := noTypesPool()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: "spot.nocompatible"},
		InvolvedObject: corev1.ObjectReference{Kind: "NodePool", APIVersion: "karpenter.sh/v1", Name: "spot", UID: np.UID},
		Reason:         capacity.EventNoCompatibleInstanceTypes, Type: corev1.EventTypeWarning,
		Message: "NodePool requirements filtered out all compatible available instance types",
		Source:  corev1.EventSource{Component: capacity.KarpenterComponent}, LastTimestamp: metav1.NewTime(now.Add(-4 * time.Minute)),
	}
	f := newFixture(t, Options{}, nil, nil, np, noTypesClaim(), pendingPod("p1", "spot", now.Add(-5*time.Second)))
	if _, pool := f.ctrl.ObserveEvent(ev); pool != "spot" {
		t.Fatalf("ObserveEvent returned pool %q, want spot", pool)
	}
	f.reconcile("p1")
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked on an Event older than 3m: %v", snap)
	}
	ev = ev.DeepCopy()
	ev.LastTimestamp = metav1.NewTime(now.Add(-time.Second))
	if _, pool := f.ctrl.ObserveEvent(ev); pool != "spot" {
		t.Fatalf("ObserveEvent returned pool %q, want spot", pool)
	}
	if _, pool := f.ctrl.ObserveEvent(ev); pool != "" {
		t.Errorf("the same Event again returned pool %q", pool)
	}
	f.reconcile("p1")
	if out, reason := f.out(spot); !out || reason != ReasonNoInstanceTypes {
		t.Fatalf("out %v reason %q; want no_instance_types", out, reason)
	}
}

// TestObserveEvent: only Karpenter's Events are read, each once.
func TestObserveEvent(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, pendingPod("p1", "spot", now))
	p1, _ := f.get("p1")
	name := types.NamespacedName{Namespace: "web", Name: "p1"}
	ev := karpenterEvent(p1, capacity.EventFailedScheduling, exceedSpot, now)

	notKarpenter := ev.DeepCopy()
	notKarpenter.Source.Component = "default-scheduler"
	if pod, pool := f.ctrl.ObserveEvent(notKarpenter); pod.Name != "" || pool != "" {
		t.Errorf("the scheduler's Event read: %v %q", pod, pool)
	}
	if pe := f.ctrl.podEventsOf(p1); !pe.failedAt.IsZero() {
		t.Errorf("the scheduler's Event recorded: %+v", pe)
	}
	if pod, _ := f.ctrl.ObserveEvent(nil); pod.Name != "" {
		t.Error("nil Event read")
	}
	other := ev.DeepCopy()
	other.Reason = "DisruptionBlocked"
	if pod, _ := f.ctrl.ObserveEvent(other); pod.Name != "" {
		t.Error("an Event of another reason read")
	}
	// events.k8s.io writers set reportingController instead of source.
	byController := ev.DeepCopy()
	byController.Source = corev1.EventSource{}
	byController.ReportingController = capacity.KarpenterComponent
	if pod, _ := f.ctrl.ObserveEvent(byController); pod != name {
		t.Errorf("Karpenter's Event (reportingController) returned %v", pod)
	}
	if pod, _ := f.ctrl.ObserveEvent(ev); pod.Name != "" {
		t.Errorf("the same Event again returned %v", pod)
	}
	if pe := f.ctrl.podEventsOf(p1); !pe.failedAt.Equal(now) || pe.failed != exceedSpot {
		t.Errorf("recorded %+v", pe)
	}
	// An older Nominated is not read after a newer one.
	f.nominated("p1", now)
	older := karpenterEvent(p1, capacity.EventNominated, "Pod should schedule on: nodeclaim/x", now.Add(-time.Minute))
	if pod, _ := f.ctrl.ObserveEvent(older); pod.Name != "" {
		t.Errorf("an older Nominated returned %v", pod)
	}
	if pe := f.ctrl.podEventsOf(p1); !pe.nominatedAt.Equal(now) {
		t.Errorf("nominatedAt %v, want %v", pe.nominatedAt, now)
	}
	// eventTime is the latest of the Event's times.
	series := ev.DeepCopy()
	series.EventTime = metav1.NewMicroTime(now.Add(time.Minute))
	if got := eventTime(series); !got.Equal(now.Add(time.Minute)) {
		t.Errorf("eventTime %v", got)
	}
}
