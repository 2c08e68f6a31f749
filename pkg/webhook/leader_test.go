package webhook

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/lease"
)

// cached is the Lease named key as its informer's events leave it once l is
// listed.
func cached(key client.ObjectKey, l *coordinationv1.Lease) *lease.Watch {
	w := lease.NewWatch(key)
	w.OnAdd(l, true)
	return w
}

func TestLeaseLiveness(t *testing.T) {
	renewed := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apportion-system", Name: "apportion-placement"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), RenewTime: &metav1.MicroTime{Time: renewed},
			LeaseDurationSeconds: ptr.To[int32](15)},
	}
	for _, tc := range []struct {
		name     string
		after    time.Duration
		grace    time.Duration
		disabled bool
		name2    string
		want     bool
	}{
		{name: "fresh", after: 5 * time.Second, want: true},
		{name: "expired", after: 16 * time.Second, want: false},
		{name: "expired but within grace", after: 16 * time.Second, grace: 15 * time.Second, want: true},
		{name: "beyond grace", after: 31 * time.Second, grace: 15 * time.Second, want: false},
		{name: "no lease", after: time.Second, name2: "other", want: false},
		{name: "no election", after: time.Hour, name2: "other", disabled: true, want: true},
	} {
		name := "apportion-placement"
		if tc.name2 != "" {
			name = tc.name2
		}
		l := &LeaseLiveness{Lease: cached(client.ObjectKey{Namespace: "apportion-system", Name: name}, lease),
			Clock: clocktesting.NewFakePassiveClock(renewed.Add(tc.after)), Grace: tc.grace, Disabled: tc.disabled}
		if got := l.Alive(context.Background()); got != tc.want {
			t.Errorf("%s: Alive = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestReleasedLeaseIsAHandover: a leader that stops on SIGTERM releases its
// Lease as client-go does (empty holder, 1s duration, renewTime now); until
// a successor acquires it, pods must still be gated.
func TestReleasedLeaseIsAHandover(t *testing.T) {
	released := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	const grace = 15 * time.Second
	for _, tc := range []struct {
		name  string
		spec  coordinationv1.LeaseSpec
		after time.Duration
		want  bool
	}{
		{name: "released just now", after: time.Second, want: true,
			spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1), RenewTime: &metav1.MicroTime{Time: released}}},
		{name: "released, holder field absent", after: 10 * time.Second, want: true,
			spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](1), RenewTime: &metav1.MicroTime{Time: released}}},
		{name: "released longer than grace ago", after: grace + time.Second, want: false,
			spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1), RenewTime: &metav1.MicroTime{Time: released}}},
		{name: "never held", after: time.Second, want: false,
			spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("")}},
		{name: "never held, empty spec", after: time.Second, want: false},
	} {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "apportion-system", Name: "apportion-placement"}, Spec: tc.spec}
		l := &LeaseLiveness{Lease: cached(client.ObjectKeyFromObject(lease), lease),
			Clock: clocktesting.NewFakePassiveClock(released.Add(tc.after)), Grace: grace}
		if got := l.Alive(context.Background()); got != tc.want {
			t.Errorf("%s: Alive = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// freshLiveness is the liveness of a leader that renewed its Lease a second
// ago.
func freshLiveness() *LeaseLiveness {
	renewed := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apportion-system", Name: "apportion-placement"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), RenewTime: &metav1.MicroTime{Time: renewed},
			LeaseDurationSeconds: ptr.To[int32](15)},
	}
	return &LeaseLiveness{Lease: cached(client.ObjectKeyFromObject(l), l), Clock: clocktesting.NewFakePassiveClock(renewed.Add(time.Second))}
}

// Every admission asks whether a leader is alive: the answer must not copy
// the Lease, or anything else.
func TestAliveDoesNotAllocate(t *testing.T) {
	l, ctx := freshLiveness(), context.Background()
	if !l.Alive(ctx) {
		t.Fatal("a Lease renewed a second ago is not alive")
	}
	if n := testing.AllocsPerRun(100, func() { l.Alive(ctx) }); n != 0 {
		t.Errorf("Alive allocates %v times per admission, want none", n)
	}
}

func BenchmarkAlive(b *testing.B) {
	l, ctx := freshLiveness(), context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if !l.Alive(ctx) {
			b.Fatal("a Lease renewed a second ago is not alive")
		}
	}
}
