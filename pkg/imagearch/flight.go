package imagearch

import (
	"context"
	"errors"
	"fmt"

	"github.com/jellydator/ttlcache/v3"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/registries"
)

// ErrSlowRegistry is wrapped when a look-up is skipped because an earlier
// caller already waited its whole timeout for the same, still running,
// registry request.
var ErrSlowRegistry = errors.New("the registry has not answered within the image timeout; a look-up is still under way")

// slowFlight fails at once when a caller already timed out waiting for the
// look-up under key, which is still running.
func (i *Inspector) slowFlight(key, ref string) error {
	if !i.slow.Has(key) {
		return nil
	}
	lookupError.Inc()
	return fmt.Errorf("inspecting image %s: %w", ref, ErrSlowRegistry)
}

// start joins or begins the registry look-up of ref, detached from ctx but
// keeping its values (the logger).
func (i *Inspector) start(ctx context.Context, key, ref string, policy corev1.PullPolicy, creds Credentials) <-chan singleflight.Result {
	detached := context.WithoutCancel(ctx)
	return i.flights.DoChan(key, func() (any, error) {
		defer i.slow.Delete(key)
		// A flight that ended between our cache miss and DoChan has stored
		// its answer already: use it rather than ask the registry again.
		for _, k := range []string{ref, key} {
			if it := i.cache.Get(k); it != nil && i.fresh(it.Value(), ref, policy) {
				return it.Value(), nil
			}
		}
		return i.fetch(detached, key, ref, creds), nil
	})
}

func (i *Inspector) wait(ctx context.Context, key, ref string, ch <-chan singleflight.Result) ([]Platform, error) {
	select {
	case r := <-ch:
		e := r.Val.(*entry)
		if e.err != nil {
			lookupError.Inc()
		} else {
			lookupMiss.Inc()
		}
		return e.platforms, e.err
	case <-ctx.Done():
		lookupError.Inc()
		i.slow.Set(key, struct{}{}, ttlcache.DefaultTTL)
		return nil, fmt.Errorf("inspecting image %s: waiting for the registry: %w", ref, context.Cause(ctx))
	}
}

// fetch asks the registry and caches the answer, unless the registry was
// skipped by its breaker (that answer is the breaker's to give again): under
// key when the answer depends on the credentials (anything the pod's own
// credentials answered for, platforms or failure; a refusal), else under ref.
func (i *Inspector) fetch(ctx context.Context, key, ref string, creds Credentials) *entry {
	ctx, cancel := context.WithTimeout(ctx, i.opts.RegistryTimeout)
	defer cancel()
	e := &entry{pinned: isPinned(ref)}
	var personal bool
	e.platforms, personal, e.err = i.lookup(ctx, ref, creds)
	e.fetched = i.opts.Clock.Now()
	if e.err != nil {
		e.err = fmt.Errorf("inspecting image %s: %w", ref, e.err)
		if errors.Is(e.err, ErrCircuitOpen) {
			return e
		}
		if d := (*registries.DeniedError)(nil); errors.As(e.err, &d) {
			metrics.ImageRegistryDeniedTotal.WithLabelValues(string(d.Reason)).Inc()
		}
	}
	if personal || isImageError(e.err) {
		// Theirs only: read with the pod's own credentials, or refused to them.
		i.put(key, e)
		return e
	}
	i.put(ref, e)
	return e
}
