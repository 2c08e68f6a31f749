package operator

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// addHealthChecks: /healthz answers while the process runs; /readyz once the
// webhook server listens and the informer caches have synced, until the
// replica begins to drain.
func (op *Operator) addHealthChecks() error {
	if err := op.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := op.AddReadyzCheck("webhook", op.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	if op.drain != nil {
		if err := op.AddReadyzCheck("drain", op.drain.notDraining); err != nil {
			return err
		}
	}
	return op.AddReadyzCheck("caches", cachesSynced(op.GetCache()))
}

// cacheSyncer is the part of the manager's cache readiness looks at.
type cacheSyncer interface {
	WaitForCacheSync(ctx context.Context) bool
}

// cachesSynced is a readiness check that passes once the manager's informers
// have synced, and from then on. With cert-manager or provided certificates
// the webhook server listens as soon as the manager starts, before the caches
// (controller-runtime starts webhooks first; with self-managed certificates
// it waits for the rotator, which starts after the caches). Until the caches
// have synced, an admission reads "cache not started" or blocks on the sync:
// a pod would be admitted without its gate, or wait out the webhook timeout
// and fail open. A replica Ready only after the sync gets no admission
// before it, whether it is new in a rollout or replaces a stopped leader in
// the middle of a burst.
func cachesSynced(c cacheSyncer) healthz.Checker {
	var synced atomic.Bool
	return func(req *http.Request) error {
		if synced.Load() {
			return nil
		}
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced yet")
		}
		synced.Store(true)
		return nil
	}
}
