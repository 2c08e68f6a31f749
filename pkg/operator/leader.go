package operator

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	"github.com/apportion-dev/apportion/pkg/options"
)

// LeaseLock is the placement Lease's lock, the one controller-runtime would
// build, that also remembers when this replica last renewed the Lease. A
// leader frozen past the lease duration (a stopped process, a VM paused)
// wakes up believing it still leads until its renew deadline passes, while
// another replica already holds the Lease and decides; Renewed is how the
// placement controller tells, at no API cost, that it must not decide.
type LeaseLock struct {
	resourcelock.Interface
	lease   *resourcelock.LeaseLock
	clock   clock.PassiveClock
	renewed atomic.Pointer[time.Time]
}

// newLeaseLock builds the lock as controller-runtime does: the identity is
// the host name and a UUID, and a call times out at half the renew deadline
// (at least a second), so one hung request does not cost the Lease.
func newLeaseLock(cfg *rest.Config, o *options.Options, clk clock.PassiveClock) (*LeaseLock, error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("reading the host name for the Lease's identity: %w", err)
	}
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	cfg.Timeout = max(o.RenewDeadline/2, time.Second)
	cc, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Lease client: %w", err)
	}
	lease := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.SystemNamespace, Name: o.LeaderElectionID},
		Client:     cc,
		LockConfig: resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID())},
	}
	return &LeaseLock{Interface: lease, lease: lease, clock: clk}, nil
}

// Create is the Lease's first acquisition.
func (l *LeaseLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Create)
}

// Update is an acquisition, a renewal or, with no holder, the release.
func (l *LeaseLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.Interface.Update)
}

// write keeps the time the write was sent, not the time it was answered:
// the Lease is valid for a lease duration from its renewTime, which the
// elector set before the call. A release, or a record naming another
// holder, forgets the renewal.
func (l *LeaseLock) write(ctx context.Context, ler resourcelock.LeaderElectionRecord, send func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	sent := l.clock.Now()
	if err := send(ctx, ler); err != nil {
		return err
	}
	if ler.HolderIdentity == l.Identity() {
		l.renewed.Store(&sent)
	} else {
		l.renewed.Store(nil)
	}
	return nil
}

// Renewed is when this replica sent its last successful acquisition or
// renewal of the Lease, by its own clock; zero when it does not hold it.
func (l *LeaseLock) Renewed() time.Time {
	if t := l.renewed.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// withEvents records the lock's Events ("became leader") as
// controller-runtime does, once the manager that sends them exists.
func (l *LeaseLock) withEvents(r resourcelock.EventRecorder) {
	l.lease.LockConfig.EventRecorder = r
}
