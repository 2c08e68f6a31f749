package webhook

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LeaseLiveness tells whether a placement leader is alive: its Lease was
// renewed within the lease duration, or released for a successor within
// Grace. Pods are gated only while it is, so a cluster without a working
// placement controller never holds pods.
type LeaseLiveness struct {
	Reader    client.Reader
	Clock     clock.PassiveClock
	Namespace string
	Name      string
	// Grace extends the Lease's validity: after a leader dies, its Lease
	// expires before another replica acquires it (up to a retry period
	// later). Pods admitted in between are gated too; the new leader places
	// them, and the gate janitor releases them if none comes.
	Grace time.Duration
	// Disabled means there is no election: this process places pods itself
	// and is alive as long as it serves.
	Disabled bool
}

// Alive reads the Lease from the cache: no API call.
func (l *LeaseLiveness) Alive(ctx context.Context) bool {
	if l.Disabled {
		return true
	}
	var lease coordinationv1.Lease
	if err := l.Reader.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.Name}, &lease); err != nil {
		return false
	}
	s := lease.Spec
	if s.RenewTime == nil {
		return false
	}
	if s.HolderIdentity == nil || *s.HolderIdentity == "" {
		// Released: a leader stopping on SIGTERM empties the holder (and
		// sets a 1s duration) as its last act. Another replica acquires the
		// Lease within a retry period, so until Grace has passed since the
		// release this is a handover, not an absence: pods stay gated for
		// the successor, and the gate janitor releases them if none comes.
		return l.Clock.Now().Before(s.RenewTime.Add(l.Grace))
	}
	if s.LeaseDurationSeconds == nil {
		return false
	}
	expiry := s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds)*time.Second + l.Grace)
	return l.Clock.Now().Before(expiry)
}
