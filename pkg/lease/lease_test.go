package lease_test

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/lease"
)

const self = "apportion-0_1b4e"

var (
	key      = client.ObjectKey{Namespace: "apportion", Name: "apportion-placement"}
	acquired = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	renewed  = acquired.Add(time.Minute)
)

func placementLease(holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(15)),
			AcquireTime: ptr.To(metav1.NewMicroTime(acquired)), RenewTime: ptr.To(metav1.NewMicroTime(renewed))}}
}

// The watch follows the placement Lease's events, and only its: a Lease of
// the same name in a tenant's namespace changes nothing.
func TestWatchFollowsThePlacementLease(t *testing.T) {
	w := lease.NewWatch(key)
	want := func(step, holder string, cached bool) {
		t.Helper()
		if got, ok := w.Spec(); got.Holder != holder || ok != cached {
			t.Errorf("%s: holder %q (cached %v), want %q (cached %v)", step, got.Holder, ok, holder, cached)
		}
	}
	want("before the listing", "", false)
	w.OnAdd(placementLease(self), true)
	want("listed", self, true)
	tenant := placementLease("apportion-1_77aa")
	tenant.Namespace = "tenant"
	w.OnAdd(tenant, false)
	w.OnUpdate(placementLease(self), tenant)
	want("a tenant's Lease of the same name", self, true)
	released := placementLease(self)
	released.Spec.HolderIdentity = nil
	w.OnUpdate(placementLease(self), released)
	want("released", "", true)
	w.OnUpdate(released, placementLease("apportion-1_77aa"))
	want("acquired by another replica", "apportion-1_77aa", true)
	w.OnDelete(tenant)
	want("a tenant's Lease deleted", "apportion-1_77aa", true)
	w.OnDelete(toolscache.DeletedFinalStateUnknown{Key: key.String(), Obj: placementLease("apportion-1_77aa")})
	want("deleted, seen late", "", false)
	w.OnAdd(placementLease(self), false)
	w.OnDelete(placementLease(self))
	want("deleted", "", false)
}

// The spec keeps the times and the duration, and tells an unset duration
// from any set one.
func TestWatchKeepsTheSpec(t *testing.T) {
	w := lease.NewWatch(key)
	w.OnAdd(placementLease(self), true)
	got, _ := w.Spec()
	if want := (lease.Spec{Holder: self, AcquireTime: acquired, RenewTime: renewed, Duration: 15 * time.Second, HasDuration: true}); got != want {
		t.Errorf("spec %+v, want %+v", got, want)
	}
	bare := placementLease(self)
	bare.Spec = coordinationv1.LeaseSpec{}
	w.OnUpdate(placementLease(self), bare)
	if got, ok := w.Spec(); !ok || got != (lease.Spec{}) {
		t.Errorf("empty spec read as %+v (cached %v), want the zero Spec", got, ok)
	}
}

// Every admission reads the Lease: a read allocates nothing.
func TestReadingTheSpecDoesNotAllocate(t *testing.T) {
	w := lease.NewWatch(key)
	w.OnAdd(placementLease(self), true)
	if n := testing.AllocsPerRun(100, func() { w.Spec() }); n != 0 {
		t.Errorf("Spec allocates %v times, want none", n)
	}
}

func TestSyncedFollowsTheRegistration(t *testing.T) {
	w := lease.NewWatch(key)
	if w.Synced() {
		t.Error("a Watch with no registration reads as synced")
	}
	listed := false
	w.WithSynced(func() bool { return listed })
	if w.Synced() {
		t.Error("synced before the registration's first listing")
	}
	if w.Ready(nil) == nil {
		t.Error("ready before the registration's first listing")
	}
	listed = true
	if !w.Synced() {
		t.Error("not synced after the registration's first listing")
	}
	if err := w.Ready(nil); err != nil {
		t.Errorf("not ready after the registration's first listing: %v", err)
	}
}
