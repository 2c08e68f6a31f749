package gatejanitor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/lease"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/test"
)

func TestReleasesAfterTimeoutOnly(t *testing.T) {
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", CreationTimestamp: metav1.NewTime(start)},
		Gates: []string{"other"}, Gated: true})
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod).Build()
	clk := clocktesting.NewFakeClock(start.Add(10 * time.Second))
	rec := events.NewFakeRecorder(5)
	j := NewController(clk, c, rec, 30*time.Second)
	ctx := context.Background()
	get := func() *corev1.Pod {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}

	res, err := j.Reconcile(ctx, get())
	if err != nil || res.RequeueAfter != 20*time.Second {
		t.Fatalf("before the timeout: %+v, %v; want a requeue after 20s", res, err)
	}
	if len(get().Spec.SchedulingGates) != 2 {
		t.Fatal("released before the timeout")
	}
	clk.Step(21 * time.Second)
	if _, err := j.Reconcile(ctx, get()); err != nil {
		t.Fatal(err)
	}
	if gates := get().Spec.SchedulingGates; len(gates) != 1 || gates[0].Name != "other" {
		t.Fatalf("gates after timeout: %+v, want only the other gate", gates)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "Warning PlacementTimeout") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no Warning event")
	}
}

// TestReleaseErrorIsRetried: when the API refuses the release, the janitor
// returns the error (the workqueue retries it with backoff), and releases
// the pod once the API answers.
func TestReleaseErrorIsRetried(t *testing.T) {
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", UID: "p-uid", CreationTimestamp: metav1.NewTime(start)}, Gated: true})
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod).Build(),
		test.FailPatches(1, apierrors.NewServiceUnavailable("apiserver restarting")))
	j := NewController(clocktesting.NewFakeClock(start.Add(time.Minute)), c, events.NewFakeRecorder(5), 30*time.Second)
	ctx := context.Background()
	for attempt := 1; attempt <= 2; attempt++ {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		res, err := j.Reconcile(ctx, &p)
		if failed := attempt == 1; (err != nil) != failed || !apierrors.IsServiceUnavailable(err) && failed {
			t.Fatalf("attempt %d returned %v; want the API error only on the first", attempt, err)
		}
		if res.RequeueAfter != 0 {
			t.Errorf("attempt %d: RequeueAfter %s, want the workqueue's backoff", attempt, res.RequeueAfter)
		}
	}
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.SchedulingGates) != 0 {
		t.Errorf("still gated after the API recovered: %v", p.Spec.SchedulingGates)
	}
}

// TestTimeoutCountsFromLeaderChange: a pod gated before the placement leader
// changed gets the whole timeout again from the new leader's acquisition, so
// a takeover does not release the pods its predecessor left; without a
// Lease, or with one acquired before the pod, its creation counts.
func TestTimeoutCountsFromLeaderChange(t *testing.T) {
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", CreationTimestamp: metav1.NewTime(start)}, Gated: true})
	lease := func(acquired time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "apportion-system", Name: "apportion-placement"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("b"), AcquireTime: &metav1.MicroTime{Time: acquired}}}
	}
	for _, tc := range []struct {
		name    string
		lease   *coordinationv1.Lease
		want    time.Duration // RequeueAfter at start+35s; 0: released
		withKey bool
	}{
		{"leader changed 20s after the pod", lease(start.Add(20 * time.Second)), 15 * time.Second, true},
		{"leader changed before the pod", lease(start.Add(-time.Hour)), 0, true},
		{"no Lease yet", nil, 0, true},
		{"no leader election", lease(start.Add(20 * time.Second)), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod.DeepCopy())
			if tc.lease != nil {
				b = b.WithObjects(tc.lease)
			}
			c := b.Build()
			j := NewController(clocktesting.NewFakeClock(start.Add(35*time.Second)), c, events.NewFakeRecorder(5), 30*time.Second)
			if tc.withKey {
				j.WithLease(cached(tc.lease))
			}
			var p corev1.Pod
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err != nil {
				t.Fatal(err)
			}
			res, err := j.Reconcile(context.Background(), &p)
			if err != nil {
				t.Fatal(err)
			}
			if res.RequeueAfter != tc.want {
				t.Errorf("RequeueAfter %s, want %s", res.RequeueAfter, tc.want)
			}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err != nil {
				t.Fatal(err)
			}
			if released := len(p.Spec.SchedulingGates) == 0; released != (tc.want == 0) {
				t.Errorf("released %v, want %v", released, tc.want == 0)
			}
		})
	}
}

// cached is the placement Lease as its informer's events leave it once l is
// listed; nil: not created yet.
func cached(l *coordinationv1.Lease) *lease.Watch {
	w := lease.NewWatch(client.ObjectKey{Namespace: "apportion-system", Name: "apportion-placement"})
	if l != nil {
		w.OnAdd(l, true)
	}
	return w
}

// placementLease is the placement leader's Lease, acquired at acquired.
func placementLease(acquired time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "apportion-system", Name: "apportion-placement"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("b"), AcquireTime: &metav1.MicroTime{Time: acquired}}}
}

// TestCrashLoopingLeaderCannotHoldPods: a leader that changes every 29 s
// (just under the 30 s timeout) would restart the pod's timeout for ever;
// the pod is released MaxWaitTimeouts timeouts after its creation, not a
// second earlier, and no requeue aims past that.
func TestCrashLoopingLeaderCannotHoldPods(t *testing.T) {
	const timeout = 30 * time.Second
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", CreationTimestamp: metav1.NewTime(start)}, Gated: true})
	lease := placementLease(start)
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod, lease).Build()
	clk := clocktesting.NewFakeClock(start)
	w := cached(lease)
	j := NewController(clk, c, events.NewFakeRecorder(5), timeout).WithLease(w)
	ctx := context.Background()
	limit := start.Add(MaxWaitTimeouts * timeout)
	for clk.Now().Before(limit.Add(time.Minute)) {
		if clk.Since(lease.Spec.AcquireTime.Time) >= timeout-time.Second {
			old := lease.DeepCopy()
			lease.Spec.AcquireTime = &metav1.MicroTime{Time: clk.Now()}
			w.OnUpdate(old, lease)
		}
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		res, err := j.Reconcile(ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		released := len(p.Spec.SchedulingGates) == 0
		switch {
		case released && clk.Now().Before(limit):
			t.Fatalf("released %s after creation, before the cap of %s", clk.Since(start), limit.Sub(start))
		case released:
			return
		case res.RequeueAfter <= 0 || clk.Now().Add(res.RequeueAfter).After(limit):
			t.Fatalf("at %s: RequeueAfter %s, past the cap at %s", clk.Since(start), res.RequeueAfter, limit.Sub(start))
		}
		clk.Step(time.Second)
	}
	t.Fatalf("still gated %s after creation, the leader changing every %s", clk.Since(start), timeout-time.Second)
}

// TestTheLeaseIsNotReadThroughTheClient: every gated pod reads the Lease;
// a read through the cache would copy it each time. The Lease as its
// informer's events left it counts, and the client is never asked.
func TestTheLeaseIsNotReadThroughTheClient(t *testing.T) {
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", CreationTimestamp: metav1.NewTime(start)}, Gated: true})
	l := placementLease(start.Add(20 * time.Second))
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod, l).Build(), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				t.Error("the Lease is read through the client: a copy per gated pod")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	j := NewController(clocktesting.NewFakeClock(start.Add(35*time.Second)), c, events.NewFakeRecorder(5), 30*time.Second).WithLease(cached(l))
	res, err := j.Reconcile(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != 15*time.Second {
		t.Errorf("RequeueAfter %s, want 15s: the timeout counts from the leader's acquisition", res.RequeueAfter)
	}
}

// TestFutureAcquireTimeCountsAsNow: a Lease acquired "an hour from now" (the
// leader's clock runs ahead) restarts the timeout from now, not from an hour
// ahead, and cannot hold the pod past the cap.
func TestFutureAcquireTimeCountsAsNow(t *testing.T) {
	const timeout = 30 * time.Second
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", CreationTimestamp: metav1.NewTime(start)}, Gated: true})
	for _, tc := range []struct {
		at   time.Duration // the clock, from the pod's creation
		want time.Duration // RequeueAfter; 0: released
	}{
		{10 * time.Second, timeout},
		{MaxWaitTimeouts*timeout - 5*time.Second, 5 * time.Second},
		{MaxWaitTimeouts * timeout, 0},
	} {
		now := start.Add(tc.at)
		l := placementLease(now.Add(time.Hour))
		c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod.DeepCopy(), l).Build()
		j := NewController(clocktesting.NewFakeClock(now), c, events.NewFakeRecorder(5), timeout).WithLease(cached(l))
		var p corev1.Pod
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		res, err := j.Reconcile(context.Background(), &p)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		if released := len(p.Spec.SchedulingGates) == 0; res.RequeueAfter != tc.want || released != (tc.want == 0) {
			t.Errorf("at %s: RequeueAfter %s, released %v; want %s", tc.at, res.RequeueAfter, released, tc.want)
		}
	}
}

// TestRefusedReleaseIsTriedOncePerTimeout: an admission policy that refuses
// even the gate's removal is counted and named in a Warning Event on the
// pod, and the release is tried again after a gate timeout, not at the
// workqueue's backoff.
func TestRefusedReleaseIsTriedOncePerTimeout(t *testing.T) {
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", UID: "p-uid", CreationTimestamp: metav1.NewTime(start)}, Gated: true})
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod).Build(),
		test.FailPatches(1, test.PolicyDenial("p", "no-pod-updates", "no-pod-updates-web", "pods are immutable")))
	rec := events.NewFakeRecorder(5)
	j := NewController(clocktesting.NewFakeClock(start.Add(time.Minute)), c, rec, 30*time.Second)
	refused := metrics.RefusedTotal.WithLabelValues(decision.OperationRelease)
	before := testutil.ToFloat64(refused)
	res, err := j.Reconcile(context.Background(), pod)
	if err != nil || res.RequeueAfter != 30*time.Second {
		t.Fatalf("Reconcile = %+v, %v; want a retry after the gate timeout", res, err)
	}
	if got := testutil.ToFloat64(refused) - before; got != 1 {
		t.Errorf("refused releases counted: %v, want 1", got)
	}
	select {
	case e := <-rec.Events:
		if !strings.HasPrefix(e, "Warning PlacementReleaseRefused ValidatingAdmissionPolicy 'no-pod-updates' with binding 'no-pod-updates-web' refused") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no Warning event")
	}
}
