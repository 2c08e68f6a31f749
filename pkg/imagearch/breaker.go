package imagearch

import (
	"context"
	"errors"
	"time"

	"github.com/jellydator/ttlcache/v3"
	"github.com/sony/gobreaker/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/metrics"
)

// maxBreakers bounds the registries with a breaker; the least recently used
// is forgotten first, and any idle for an hour.
const maxBreakers = 1024

type breaker = gobreaker.CircuitBreaker[[]Platform]

// breakers are the per-registry circuit breakers, keyed by registry host.
type breakers struct {
	opts  Options
	cache *ttlcache.Cache[string, *breaker]
}

func newBreakers(opts Options) *breakers {
	return &breakers{opts: opts, cache: ttlcache.New(
		ttlcache.WithCapacity[string, *breaker](maxBreakers),
		ttlcache.WithTTL[string, *breaker](time.Hour),
	)}
}

// get returns host's breaker, made on first use; its state changes are logged
// with the logger of ctx.
func (b *breakers) get(ctx context.Context, host string) *breaker {
	it, _ := b.cache.GetOrSetFunc(host, func() *breaker {
		logger := log.FromContext(ctx).WithValues("registry", host)
		failures := uint32(b.opts.BreakerFailures)
		return gobreaker.NewCircuitBreaker[[]Platform](gobreaker.Settings{
			Name:        host,
			MaxRequests: 1,
			Timeout:     b.opts.BreakerOpen,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
			// The registry answered about the image: it works. A host the
			// Registries policy refused (a redirect's) says nothing about it.
			IsSuccessful: func(err error) bool { return err == nil || isImageError(err) || isDenied(err) },
			OnStateChange: func(_ string, from, to gobreaker.State) {
				logger.Info("registry circuit breaker changed state", "from", from.String(), "to", to.String())
				if to == gobreaker.StateOpen {
					metrics.ImageBreakerOpenTotal.WithLabelValues(metrics.Registries.Value(host)).Inc()
				}
			},
		})
	})
	return it.Value()
}

func open(br *breaker) bool { return br.State() == gobreaker.StateOpen }

func isBreakerRejection(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}
