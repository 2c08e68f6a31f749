package webhook

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestLeaseLiveness(t *testing.T) {
	renewed := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apportion-system", Name: "apportion-placement"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), RenewTime: &metav1.MicroTime{Time: renewed},
			LeaseDurationSeconds: ptr.To[int32](15)},
	}
	reader := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(lease).Build()
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
		l := &LeaseLiveness{Reader: reader, Clock: clocktesting.NewFakePassiveClock(renewed.Add(tc.after)),
			Namespace: "apportion-system", Name: name, Grace: tc.grace, Disabled: tc.disabled}
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
		reader := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(lease).Build()
		l := &LeaseLiveness{Reader: reader, Clock: clocktesting.NewFakePassiveClock(released.Add(tc.after)),
			Namespace: "apportion-system", Name: "apportion-placement", Grace: grace}
		if got := l.Alive(context.Background()); got != tc.want {
			t.Errorf("%s: Alive = %v, want %v", tc.name, got, tc.want)
		}
	}
}
