package placement

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestPendingExpiry: each run drops the pending decisions older than
// pendingMaxAge, keeps the younger, and comes back after expiryInterval.
func TestPendingExpiry(t *testing.T) {
	const rev = "web/rs1"
	now := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	tl := newTally()
	tl.Record("old", rev, "a", now.Add(-pendingMaxAge-time.Second))
	tl.Record("new", rev, "a", now)
	e := &pendingExpiry{clock: clk, tally: tl}
	res, err := e.Reconcile(context.Background())
	if err != nil || res.RequeueAfter != expiryInterval {
		t.Fatalf("Reconcile: %+v, %v; want a requeue after %s", res, err, expiryInterval)
	}
	if tl.Decided("old") || !tl.Decided("new") {
		t.Errorf("after expiry: old decided %v, new decided %v; want only the new one kept", tl.Decided("old"), tl.Decided("new"))
	}
}
