package fallback

import (
	"context"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/test"
)

// reconcilePool reconciles the spot NodePool.
func (f *fixture) reconcilePool() reconcile.Result {
	f.t.Helper()
	res, err := f.ctrl.ReconcilePool(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "spot"}})
	if err != nil {
		f.t.Fatalf("ReconcilePool spot: %v", err)
	}
	return res
}

// updatePool changes the cached NodePool spot.
func (f *fixture) updatePool(mutate func(*karpv1.NodePool)) {
	f.t.Helper()
	np := &karpv1.NodePool{}
	if err := f.client.Get(context.Background(), client.ObjectKey{Name: "spot"}, np); err != nil {
		f.t.Fatal(err)
	}
	mutate(np)
	if err := f.client.Update(context.Background(), np); err != nil {
		f.t.Fatal(err)
	}
}

// until is the end of key's outage (or of its last one).
func (f *fixture) until(key capacity.Key) time.Time {
	_, _, until := f.tracker.Unavailable(key)
	return until
}

func rechecks(reason, result string) float64 {
	return testutil.ToFloat64(metrics.CapacityRechecksTotal.WithLabelValues(reason, result))
}

// limitsFixture: spot's cpu limit leaves 500m, less than the 2 cpu of the
// one instance type it allows; Karpenter said the pool
// exceeds its limits for p1; the pool is out for every workload.
func limitsFixture(t *testing.T) *fixture {
	t.Helper()
	q := resource.MustParse
	np := nodePool("spot", metav1.ConditionTrue, allowing(spotType), func(np *karpv1.NodePool) {
		np.Spec.Limits = karpv1.Limits(corev1.ResourceList{corev1.ResourceCPU: q("10")})
		np.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: q("9500m"), corev1.ResourceMemory: q("20Gi")}
	})
	// Its only instance type has 2 cpu: 500m left is less than one.
	f := newFixture(t, Options{}, nil, nil, np, launchedClaim("spot-a", corev1.ResourceList{corev1.ResourceCPU: q("2")}),
		pendingPod("p1", "spot", now.Add(-5*time.Second)))
	f.failedScheduling("p1", exceedSpot, now)
	f.reconcile("p1")
	if out, reason := f.out(capacity.PoolKey("spot")); !out || reason != ReasonLimits {
		t.Fatalf("out %v reason %q; want limits", out, reason)
	}
	select {
	case ev := <-f.ctrl.rechecks:
		if ev.Object.GetName() != "spot" {
			t.Fatalf("recheck asked for %q", ev.Object.GetName())
		}
	default:
		t.Fatal("the new outage was not handed to the NodePool outage controller")
	}
	f.events()
	return f
}

// TestLimitsOutageExtended: at the end of a limits outage the pool's limits
// and usage are unchanged: it stays out (no pod is sent there to find out
// again), for as long as they stay so.
func TestLimitsOutageExtended(t *testing.T) {
	spot := capacity.PoolKey("spot")
	f := limitsFixture(t)
	until := f.until(spot)
	if res := f.reconcilePool(); res.RequeueAfter != until.Add(-recheckLead).Sub(now) {
		t.Errorf("RequeueAfter %s, want recheckLead before the end (%s)", res.RequeueAfter, until.Add(-recheckLead).Sub(now))
	}
	before := rechecks(ReasonLimits, RecheckStill)
	for i := 0; i < 3; i++ {
		f.clock.SetTime(until.Add(-recheckLead))
		res := f.reconcilePool()
		next := f.until(spot)
		if !next.After(until) {
			t.Fatalf("recheck %d: not extended (until %v)", i, next)
		}
		if res.RequeueAfter != next.Add(-recheckLead).Sub(f.clock.Now()) {
			t.Errorf("recheck %d: RequeueAfter %s, want recheckLead before the new end", i, res.RequeueAfter)
		}
		f.clock.SetTime(until.Add(time.Second))
		if out, reason := f.out(spot); !out || reason != ReasonLimits {
			t.Fatalf("recheck %d: past the end out %v reason %q; want still out", i, out, reason)
		}
		until = next
	}
	if got := rechecks(ReasonLimits, RecheckStill) - before; got != 3 {
		t.Errorf("rechecks_total{limits,still} grew by %v, want 3", got)
	}
	if evs := f.events(); len(evs) != 0 {
		t.Errorf("events for an extended outage: %q", evs)
	}
}

// TestLimitsOutageLifted: more room in the pool (a limit raised or removed,
// usage lower) ends the outage at once; changes that give no room do not.
func TestLimitsOutageLifted(t *testing.T) {
	q := resource.MustParse
	spot := capacity.PoolKey("spot")
	for _, tc := range []struct {
		name   string
		mutate func(*karpv1.NodePool)
		lifted bool
	}{
		{"limit raised", func(np *karpv1.NodePool) { np.Spec.Limits[corev1.ResourceCPU] = q("20") }, true},
		{"limit removed", func(np *karpv1.NodePool) { np.Spec.Limits = nil }, true},
		{"usage lower", func(np *karpv1.NodePool) { np.Status.Resources[corev1.ResourceCPU] = q("8") }, true},
		{"limit lowered", func(np *karpv1.NodePool) { np.Spec.Limits[corev1.ResourceCPU] = q("9") }, false},
		{"usage higher", func(np *karpv1.NodePool) { np.Status.Resources[corev1.ResourceCPU] = q("10") }, false},
		{"unlimited usage lower", func(np *karpv1.NodePool) { np.Status.Resources[corev1.ResourceMemory] = q("1Gi") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := limitsFixture(t)
			f.clock.Step(time.Minute)
			f.updatePool(tc.mutate)
			before := rechecks(ReasonLimits, RecheckLifted)
			res := f.reconcilePool()
			out, _ := f.out(spot)
			if out == tc.lifted {
				t.Fatalf("out %v, want lifted %v", out, tc.lifted)
			}
			if !tc.lifted {
				return
			}
			if res.RequeueAfter != 0 {
				t.Errorf("RequeueAfter %s after the lift", res.RequeueAfter)
			}
			if got := f.until(spot); !got.Equal(f.clock.Now()) {
				t.Errorf("last outage ended %v, want now", got)
			}
			if got := rechecks(ReasonLimits, RecheckLifted) - before; got != 1 {
				t.Errorf("rechecks_total{limits,lifted} grew by %v, want 1", got)
			}
			if got := testutil.ToFloat64(metrics.CapacityUnavailable.WithLabelValues(capacity.KindNodePool, "cluster")); got != 0 {
				t.Errorf("unavailable gauge %v after the lift", got)
			}
			// p1's Event is from before the lift: not counted again.
			f.reconcile("p1")
			if out, _ := f.out(spot); out {
				t.Error("marked again from the Event of the lifted outage")
			}
		})
	}
}

// TestNotReadyOutageRechecked: a not_ready outage is lifted when the pool is
// Ready again, and extended when it still is not at the outage's end.
//
// (A not_ready outage used to be left unrecorded, so it never came back
// early and was never extended.)
func TestNotReadyOutageRechecked(t *testing.T) {
	spot := capacity.PoolKey("spot")
	setup := func(t *testing.T) *fixture {
		f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionFalse), pendingPod("p1", "spot", now.Add(-5*time.Second)))
		f.reconcile("p1")
		if out, reason := f.out(spot); !out || reason != ReasonNotReady {
			t.Fatalf("out %v reason %q; want not_ready", out, reason)
		}
		return f
	}
	t.Run("Ready again", func(t *testing.T) {
		f := setup(t)
		f.clock.Step(30 * time.Second)
		f.updatePool(func(np *karpv1.NodePool) {
			np.Status.Conditions = []status.Condition{{Type: status.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.NewTime(f.clock.Now())}}
		})
		f.reconcilePool()
		if out, _ := f.out(spot); out {
			t.Fatal("the pool is Ready again but still out")
		}
	})
	t.Run("still not Ready at the end", func(t *testing.T) {
		f := setup(t)
		until := f.until(spot)
		f.reconcilePool()
		f.clock.SetTime(until.Add(-recheckLead))
		f.reconcilePool()
		f.clock.SetTime(until.Add(time.Second))
		if out, _ := f.out(spot); !out {
			t.Fatal("a pool still not Ready came back at the end of its outage")
		}
	})
}

// noTypesEvent is Karpenter's NoCompatibleInstanceTypes on the NodePool
// np, in namespace (where Karpenter writes it: PoolEventNamespace).
func noTypesEvent(namespace string, np *karpv1.NodePool, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: namespace, Name: np.Name + ".noinstancetypes"},
		InvolvedObject: corev1.ObjectReference{Kind: "NodePool", APIVersion: "karpenter.sh/v1", Name: np.Name, UID: np.UID},
		Reason:         capacity.EventNoCompatibleInstanceTypes, Message: "NodePool requirements filtered out all compatible available instance types",
		Source: corev1.EventSource{Component: capacity.KarpenterComponent}, LastTimestamp: metav1.NewTime(at),
	}
}

// TestNoInstanceTypesOutage: at the end of a no_instance_types outage the
// question that marked the pool is asked again: while its requirements
// still leave no instance type it stays out, and once they allow one (they
// changed, or the pool's type turns out to be amd64 after all) it is back
// at once. Karpenter's Event repeated during the outage plays no part.
//
// (It used to end with its TTL whatever the state, unless the NodePool's
// generation changed: a pool that still had no instance type was sent
// pods again to find out.)
func TestNoInstanceTypesOutage(t *testing.T) {
	spot := capacity.PoolKey("spot")
	for _, tc := range []struct {
		name   string
		change func(f *fixture)
		lifted bool
	}{
		{"unchanged", func(*fixture) {}, false},
		{"requirements allow a type", func(f *fixture) {
			f.updatePool(func(np *karpv1.NodePool) {
				np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(corev1.LabelArchStable, "amd64")}
			})
		}, true},
		{"the named type launched as amd64", func(f *fixture) {
			if err := f.client.Delete(context.Background(), noTypesClaim()); err != nil {
				f.t.Fatal(err)
			}
			if err := f.client.Create(context.Background(), typedClaim("od-b", "on-demand", "a-1x", cpus(1))); err != nil {
				f.t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np := noTypesPool()
			f := newFixture(t, Options{}, nil, nil, np, noTypesClaim(), pendingPod("p1", "spot", now.Add(-5*time.Second)))
			f.ctrl.ObserveEvent(noTypesEvent(PoolEventNamespace, np, now))
			f.reconcile("p1")
			if out, reason := f.out(spot); !out || reason != ReasonNoInstanceTypes {
				t.Fatalf("out %v reason %q; want no_instance_types", out, reason)
			}
			until := f.until(spot)
			f.clock.Step(time.Minute)
			tc.change(f)
			before := rechecks(ReasonNoInstanceTypes, RecheckLifted)
			f.reconcilePool()
			if out, _ := f.out(spot); out == tc.lifted {
				t.Fatalf("out %v after the change, want lifted %v", out, tc.lifted)
			}
			if tc.lifted {
				if got := rechecks(ReasonNoInstanceTypes, RecheckLifted) - before; got != 1 {
					t.Errorf("rechecks_total{no_instance_types,lifted} grew by %v, want 1", got)
				}
				return
			}
			before = rechecks(ReasonNoInstanceTypes, RecheckStill)
			f.clock.SetTime(until.Add(-recheckLead))
			f.reconcilePool()
			if got := rechecks(ReasonNoInstanceTypes, RecheckStill) - before; got != 1 {
				t.Errorf("rechecks_total{no_instance_types,still} grew by %v, want 1", got)
			}
			f.clock.SetTime(until.Add(time.Second))
			if out, _ := f.out(spot); !out {
				t.Fatal("a pool whose requirements still leave no instance type came back at the end of its outage")
			}
		})
	}
}

// launchFailedFixture: a NodeClaim of spot was deleted before it registered
// at now; Grace later the pool is out for every workload (launch_failed).
func launchFailedFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue), pendingPod("p1", "spot", now))
	f.failClaim("spot-x1")
	f.reconcile("p1")
	f.clock.Step(Grace)
	f.reconcile("p1")
	if out, reason := f.out(capacity.PoolKey("spot")); !out || reason != ReasonLaunchFailed {
		t.Fatalf("out %v reason %q; want launch_failed", out, reason)
	}
	return f
}

// failClaim records the launch failure of a NodeClaim of spot now.
func (f *fixture) failClaim(name string) {
	f.t.Helper()
	nc := nodeClaim(name, "spot", f.clock.Now().Add(-5*time.Second))
	nc.DeletionTimestamp = ptr.To(metav1.NewTime(f.clock.Now()))
	if !f.ctrl.observeClaim(nc, true) {
		f.t.Fatalf("failure of %s not recorded", name)
	}
}

// TestLaunchFailedOutageExpires: a launch_failed outage has no evidence to
// check without a pod trying: it ends with its TTL.
func TestLaunchFailedOutageExpires(t *testing.T) {
	spot := capacity.PoolKey("spot")
	f := launchFailedFixture(t)
	until := f.until(spot)
	f.reconcilePool()
	f.clock.SetTime(until.Add(-recheckLead))
	before := rechecks(ReasonLaunchFailed, RecheckExpired)
	if res := f.reconcilePool(); res != (reconcile.Result{}) {
		t.Errorf("RequeueAfter %s for an outage that ends with its TTL", res.RequeueAfter)
	}
	if got := rechecks(ReasonLaunchFailed, RecheckExpired) - before; got != 1 {
		t.Errorf("rechecks_total{launch_failed,expired} grew by %v, want 1", got)
	}
	f.clock.SetTime(until)
	if out, _ := f.out(spot); out {
		t.Fatal("a launch_failed outage did not end with its TTL")
	}
}

// TestLaunchFailedOutageNewerFailure: a launch failure during the outage
// keeps the pool out for another outage; with no failure after that
// recheck, it ends.
//
// (The recheck used to compare with the first mark, which kept a pool out
// for good after one failure during its outage.)
func TestLaunchFailedOutageNewerFailure(t *testing.T) {
	spot := capacity.PoolKey("spot")
	f := launchFailedFixture(t)
	until := f.until(spot)
	f.reconcilePool()
	f.clock.Step(time.Minute)
	f.failClaim("spot-x2")
	f.clock.SetTime(until.Add(-recheckLead))
	f.reconcilePool()
	extended := f.until(spot)
	if !extended.After(until) {
		t.Fatalf("a failure during the outage did not extend it (until %v)", extended)
	}
	// No failure since: the extended outage ends.
	f.clock.SetTime(extended.Add(-recheckLead))
	f.reconcilePool()
	f.clock.SetTime(extended)
	if out, _ := f.out(spot); out {
		t.Fatalf("extended again without a newer failure, until %v", f.until(spot))
	}
}

// TestReconcilePoolWithoutEvidence: an outage the NodePool outage
// controller has no evidence of (a workload's, or one it did not record)
// is left to its TTL.
func TestReconcilePoolWithoutEvidence(t *testing.T) {
	spot := capacity.PoolKey("spot")
	f := newFixture(t, Options{}, nil, nil, nodePool("spot", metav1.ConditionTrue))
	until, _ := f.tracker.Mark(spot, ReasonLimits)
	f.tracker.Mark(capacity.Scoped("deploy-uid", spot), ReasonNoNodeClaim)
	if res := f.reconcilePool(); res != (reconcile.Result{}) {
		t.Errorf("result %+v", res)
	}
	f.clock.SetTime(until.Add(-time.Nanosecond))
	f.reconcilePool()
	if snap := f.tracker.Snapshot(); len(snap) != 2 {
		t.Errorf("snapshot %v, want both outages untouched", snap)
	}
	f.clock.SetTime(until)
	if out, _ := f.out(spot); out {
		t.Error("extended without evidence")
	}
}
