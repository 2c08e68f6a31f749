package operator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

type fakeSyncer struct {
	synced atomic.Bool
	calls  atomic.Int32
}

func (f *fakeSyncer) WaitForCacheSync(ctx context.Context) bool {
	f.calls.Add(1)
	if f.synced.Load() {
		return true
	}
	<-ctx.Done() // as the cache does: waits, bounded by the check's context
	return false
}

func TestCachesSyncedGatesReadiness(t *testing.T) {
	f := &fakeSyncer{}
	check := cachesSynced(f)
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	if err := check(req); err == nil {
		t.Fatal("ready before the caches synced")
	}
	f.synced.Store(true)
	if err := check(req); err != nil {
		t.Fatalf("not ready once the caches synced: %v", err)
	}
	// Once synced, ready for good, without asking the cache again.
	f.synced.Store(false)
	before := f.calls.Load()
	if err := check(req); err != nil {
		t.Fatalf("not ready after an earlier sync: %v", err)
	}
	if f.calls.Load() != before {
		t.Fatal("asked the cache again after it had synced")
	}
}
