package placement_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/lease"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

const (
	self          = "apportion-0_1b4e"
	leaseDuration = 15 * time.Second
)

var leaseKey = client.ObjectKey{Namespace: "apportion", Name: "apportion-placement"}

func placementLease(holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseKey.Namespace, Name: leaseKey.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(15)),
			RenewTime: ptr.To(metav1.NewMicroTime(now))}}
}

// cachedHolder is the placement Lease as its informer's events leave it
// once the Lease below is listed.
func cachedHolder(l *coordinationv1.Lease) *lease.Watch {
	w := lease.NewWatch(leaseKey)
	w.OnAdd(l, true)
	return w
}

// leaseFixture is a fixture whose controller checks the Lease, cached with
// holder, and counts the patches it sends. renewed is what the elector
// reports as this replica's last renewal.
func leaseFixture(t *testing.T, holder string, strategyAnnotations map[string]string, renewed func() time.Time) (*fixture, *atomic.Int32) {
	t.Helper()
	lease := placementLease(holder)
	f := newFixture(t, strategyAnnotations, lease, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	var patches atomic.Int32
	counted := interceptor.NewClient(f.client.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	f.ctrl = placement.NewController(f.clock, counted, f.recorder, &capacity.NodePoolCapacity{Reader: counted}, f.tally, 30*time.Second).
		WithLease(placement.Lease{Holder: cachedHolder(lease), Identity: self, Renewed: renewed, Duration: leaseDuration})
	return f, &patches
}

func notLeader() float64 {
	return testutil.ToFloat64(metrics.DecisionsTotal.WithLabelValues("", "", placement.ResultNotLeader))
}

// reconcileOnce reconciles the cached pod and returns the result with the
// pod as it is afterwards.
func (f *fixture) reconcileOnce(t *testing.T, pod *corev1.Pod) (time.Duration, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	var fresh corev1.Pod
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
		t.Fatal(err)
	}
	res, err := f.ctrl.Reconcile(ctx, &fresh)
	if err != nil {
		t.Fatalf("reconcile %s: %v", pod.Name, err)
	}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
		t.Fatal(err)
	}
	return res.RequeueAfter, &fresh
}

func assertLeftGated(t *testing.T, requeue time.Duration, pod *corev1.Pod, patches int32) {
	t.Helper()
	if patches != 0 {
		t.Errorf("%d patch(es) sent by a replica that does not lead", patches)
	}
	if len(pod.Spec.SchedulingGates) == 0 || pod.Annotations[annotations.Group] != "" || pod.Spec.Affinity != nil {
		t.Errorf("pod changed by a replica that does not lead: gates %v, annotations %v", pod.Spec.SchedulingGates, pod.Annotations)
	}
	if requeue <= 0 {
		t.Errorf("pod not looked at again (requeue %v): it would wait for the gate timeout if this replica leads again", requeue)
	}
}

// A leader frozen longer than the lease duration: its informer still shows
// the Lease it held, but its own last renewal is too old.
func TestNoDecisionAfterTheRenewalIsOlderThanTheLeaseDuration(t *testing.T) {
	for name, ann := range map[string]map[string]string{
		"by strategy":   {annotations.Strategy: seed004},
		"release":       nil, // no strategy: released, a write all the same
		"shadow, gated": {annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow},
	} {
		t.Run(name, func(t *testing.T) {
			var f *fixture
			f, patches := leaseFixture(t, self, ann, func() time.Time { return f.clock.Now().Add(-leaseDuration - time.Second) })
			before := notLeader()
			requeue, pod := f.reconcileOnce(t, f.gatedPod(t, 0))
			assertLeftGated(t, requeue, pod, patches.Load())
			if got := notLeader() - before; got != 1 {
				t.Errorf("not_leader counted %v times, want 1", got)
			}
			if f.tally.Decided(pod.UID) {
				t.Error("the pod stays counted as decided")
			}
		})
	}
}

// A fresh renewal is not enough: the cached Lease must name this replica.
func TestNoDecisionWhenTheCachedLeaseNamesAnotherHolder(t *testing.T) {
	var f *fixture
	f, patches := leaseFixture(t, "apportion-1_77aa", map[string]string{annotations.Strategy: seed004}, func() time.Time { return f.clock.Now() })
	requeue, pod := f.reconcileOnce(t, f.gatedPod(t, 0))
	assertLeftGated(t, requeue, pod, patches.Load())
}

// The elector never renewed (or released the Lease): no decision.
func TestNoDecisionWithoutARenewal(t *testing.T) {
	f, patches := leaseFixture(t, self, map[string]string{annotations.Strategy: seed004}, func() time.Time { return time.Time{} })
	requeue, pod := f.reconcileOnce(t, f.gatedPod(t, 0))
	assertLeftGated(t, requeue, pod, patches.Load())
}

// A leader frozen while a decision is made (an image look-up, the
// revision's lock): the check runs again just before the patch, and the
// decision it does not write is taken back from the counts.
func TestNoDecisionWhenTheLeaseGoesStaleBeforeThePatch(t *testing.T) {
	var f *fixture
	calls := 0
	f, patches := leaseFixture(t, self, map[string]string{annotations.Strategy: seed004}, func() time.Time {
		if calls++; calls == 1 {
			return f.clock.Now()
		}
		return f.clock.Now().Add(-leaseDuration)
	})
	before := testutil.ToFloat64(metrics.DecisionsTotal.WithLabelValues("karpenter.sh/capacity-type=on-demand", "od", placement.ResultNotLeader))
	requeue, pod := f.reconcileOnce(t, f.gatedPod(t, 0))
	assertLeftGated(t, requeue, pod, patches.Load())
	if calls < 2 {
		t.Fatalf("the Lease was checked %d time(s), want one before the decision and one before the patch", calls)
	}
	if got := testutil.ToFloat64(metrics.DecisionsTotal.WithLabelValues("karpenter.sh/capacity-type=on-demand", "od", placement.ResultNotLeader)) - before; got != 1 {
		t.Errorf("not_leader counted %v times for the group, want 1", got)
	}
	if f.tally.Decided(pod.UID) {
		t.Error("the decision not written stays counted")
	}
}

// A healthy leader decides as before, and so does a leader that renews
// again after it found its renewal stale.
func TestLeaderWithAFreshLeaseDecides(t *testing.T) {
	var f *fixture
	stale := true
	f, patches := leaseFixture(t, self, map[string]string{annotations.Strategy: seed004}, func() time.Time {
		if stale {
			return f.clock.Now().Add(-leaseDuration)
		}
		return f.clock.Now().Add(-leaseDuration + time.Second)
	})
	pod := f.gatedPod(t, 0)
	if _, left := f.reconcileOnce(t, pod); len(left.Spec.SchedulingGates) == 0 {
		t.Fatal("decided with a stale renewal")
	}
	stale = false
	requeue, placed := f.reconcileOnce(t, pod)
	if requeue != 0 || len(placed.Spec.SchedulingGates) != 0 || placed.Annotations[annotations.Group] != "karpenter.sh/capacity-type=on-demand" {
		t.Fatalf("leader did not decide: requeue %v, gates %v, annotations %v", requeue, placed.Spec.SchedulingGates, placed.Annotations)
	}
	if patches.Load() != 1 {
		t.Errorf("%d patches, want 1", patches.Load())
	}
}

// Shadow mode writes too: the apportion.dev/shadow annotation of an ungated
// pod.
func TestNoShadowDecisionAfterTheRenewalIsOlderThanTheLeaseDuration(t *testing.T) {
	var f *fixture
	f, patches := leaseFixture(t, self, map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow},
		func() time.Time { return f.clock.Now().Add(-leaseDuration) })
	requeue, pod := f.reconcileOnce(t, f.gatedPod(t, 0, func(p *corev1.Pod) { p.Spec.SchedulingGates = nil }))
	if patches.Load() != 0 || pod.Annotations[annotations.Shadow] != "" {
		t.Errorf("shadow decision written by a replica that does not lead: %d patch(es), annotations %v", patches.Load(), pod.Annotations)
	}
	if requeue <= 0 {
		t.Errorf("pod not looked at again (requeue %v)", requeue)
	}
}

// A Lease deleted from the cache names nobody: no decision.
func TestNoDecisionWhenTheLeaseIsNotCached(t *testing.T) {
	var f *fixture
	f, patches := leaseFixture(t, self, map[string]string{annotations.Strategy: seed004}, func() time.Time { return f.clock.Now() })
	deleted := cachedHolder(placementLease(self))
	deleted.OnDelete(placementLease(self))
	f.ctrl.WithLease(placement.Lease{Holder: deleted, Identity: self, Renewed: f.clock.Now, Duration: leaseDuration})
	requeue, pod := f.reconcileOnce(t, f.gatedPod(t, 0))
	assertLeftGated(t, requeue, pod, patches.Load())
}
