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
// more: the manager files runnables by type and, on SIGTERM, stops the
// groups in this order, all within one GracefulShutdownTimeout:
//
//  1. Others (the gate janitor, the API watch, the certificate rotator),
//     with the warmup runnables in parallel;
//  2. LeaderElection (placement, deletion cost and the other leader-only
//     controllers);
//  3. Caches;
//  4. Webhooks: cancelling the server's context makes it shut its
//     http.Server down, which closes the listener and waits for in-flight
//     admission requests, which still read the stopped caches' last
//     contents;
//  5. HTTPServers: health probes and metrics.
//
// The Lease is released only after all that. A runnable lands in Webhooks
// when it is a webhook.Server and matches no earlier case of the manager's
// sorting: a *manager.Server, or anything with a GetCache method, would be
// filed with the HTTP servers or the caches instead.
type startAfter struct {
	webhook.Server
	// ready is set before the manager starts; nil means start at once.
	ready <-chan struct{}
	// drain, when set, begins when the manager stops the server, which
	// then keeps serving until it has drained for minimumDrain.
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
		time.Sleep(s.drain.left())
		cancel()
	}()
	return s.Server.Start(inner)
}
