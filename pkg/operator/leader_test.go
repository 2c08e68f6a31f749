package operator

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeLock is a lock whose writes fail while err is set.
type fakeLock struct {
	resourcelock.Interface
	err error
}

func (f *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return f.err }
func (f *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return f.err }
func (f *fakeLock) Identity() string                                                { return "apportion-0_1b4e" }

func TestLeaseLockRemembersTheLastSuccessfulRenewal(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC))
	inner := &fakeLock{}
	l := &LeaseLock{Interface: inner, clock: clk}
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "apportion-0_1b4e"}
	if !l.Renewed().IsZero() {
		t.Fatal("renewed before any write")
	}

	acquired := clk.Now()
	if err := l.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Second)
	renewed := clk.Now()
	if err := l.Update(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if got := l.Renewed(); !got.Equal(renewed) || got.Equal(acquired) {
		t.Fatalf("Renewed() = %v, want the last renewal %v", got, renewed)
	}

	// A renewal that fails (the Lease was taken: a conflict) keeps the
	// last successful one, which ages.
	inner.err = errors.New("conflict")
	clk.Step(2 * time.Second)
	if err := l.Update(ctx, mine); err == nil {
		t.Fatal("the lock's error was swallowed")
	}
	if got := l.Renewed(); !got.Equal(renewed) {
		t.Fatalf("a failed renewal moved Renewed() to %v", got)
	}

	// The release (no holder) forgets it.
	inner.err = nil
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil {
		t.Fatal(err)
	}
	if got := l.Renewed(); !got.IsZero() {
		t.Fatalf("Renewed() = %v after the release, want zero", got)
	}
}
