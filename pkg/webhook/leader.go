package webhook

import (
	"context"
	"time"

	"k8s.io/utils/clock"

	"github.com/apportion-dev/apportion/pkg/lease"
)

// LeaseLiveness tells whether a placement leader is alive: its Lease was
// renewed within the lease duration, or released for a successor within
// Grace. Pods are gated only while it is, so a cluster without a working
// placement controller never holds pods.
type LeaseLiveness struct {
	// Lease is the placement Lease as its informer shows it.
	Lease *lease.Watch
	Clock clock.PassiveClock
	// Grace extends the Lease's validity: after a leader dies, its Lease
	// expires before another replica acquires it (up to a retry period
	// later). Pods admitted in between are gated too; the new leader places
	// them, and the gate janitor releases them if none comes.
	Grace time.Duration
	// Disabled means there is no election: this process places pods itself
	// and is alive as long as it serves.
	Disabled bool
}

// Alive reads the Lease as its informer's events left it: no API call, no
// copy of the Lease.
func (l *LeaseLiveness) Alive(context.Context) bool {
	if l.Disabled {
		return true
	}
	s, cached := l.Lease.Spec()
	if !cached || s.RenewTime.IsZero() {
		return false
	}
	if s.Holder == "" {
		// Released: a leader stopping on SIGTERM empties the holder (and
		// sets a 1s duration) as its last act. Another replica acquires the
		// Lease within a retry period, so until Grace has passed since the
		// release this is a handover, not an absence: pods stay gated for
		// the successor, and the gate janitor releases them if none comes.
		return l.Clock.Now().Before(s.RenewTime.Add(l.Grace))
	}
	if !s.HasDuration {
		return false
	}
	return l.Clock.Now().Before(s.RenewTime.Add(s.Duration + l.Grace))
}
