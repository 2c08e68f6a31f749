package operator

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// startAfter is a webhook server that starts listening only once ready is
// closed: with self-managed certificates the cert dir is empty until the
// rotator's first pass, and controller-runtime's server fails at start
// without tls.crt. Until then the server's StartedChecker fails, and so does
// /readyz.
//
// It must stay a webhook.Server (the interface, embedded here) and nothing
// more, since the manager (controller-runtime v0.24.1) files runnables by
// type and stops the groups in this order on SIGTERM
// (pkg/manager/internal.go:570-591, engageStopProcedure):
//
//  1. Others (the gate janitor, the API watch, the certificate rotator),
//     with the warmup runnables in parallel (:566-567);
//  2. LeaderElection (placement and deletion cost) (:577-578);
//  3. Caches (:584);
//  4. Webhooks (:588): cancelling the server's context makes
//     DefaultServer.Start call http.Server.Shutdown (pkg/webhook/server.go:
//     247-257), which closes the listener and waits for in-flight admission
//     requests, which still read the stopped caches' last contents;
//  5. HTTPServers: health probes and metrics (:591).
//
// The Lease is released only after all that (the deferred
// leaderElectionCancel, internal.go:545-555). Every step shares one
// GracefulShutdownTimeout (internal.go:513). A runnable lands in Webhooks
// when it matches the webhook.Server case of runnables.Add
// (runnable_group.go:79) and none before it: *manager.Server or hasCache
// (a GetCache method), which would file it with the HTTP servers or the
// caches instead.
type startAfter struct {
	webhook.Server
	// ready is set before the manager starts; nil means start at once.
	ready <-chan struct{}
	// drain, when set, begins when the manager stops the server, which
	// then keeps serving until it has drained for drainMin.
	drain *drain
}

var _ webhook.Server = (*startAfter)(nil)

// Start waits for ready, or returns with ctx, and then runs the server.
func (s *startAfter) Start(ctx context.Context) error {
	if s.ready != nil {
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil
		}
	}
	if s.drain == nil {
		return s.Server.Start(ctx)
	}
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-inner.Done():
			return
		}
		s.drain.begin(ctx, "stopping")
		time.Sleep(s.drain.left(drainMin))
		cancel()
	}()
	return s.Server.Start(inner)
}
