// Package imagearch reads which platforms a pod's images run on from their
// registries, as the kubelet would pull them: an OCI index or Docker manifest
// list gives its manifests' platforms, a single image its config's
// os/architecture/variant. Answers are cached by the reference as written
// (digest-pinned references for good, tags by their pull policy's TTL,
// failures briefly), those read with a pod's own pull credentials by the
// reference and those credentials; concurrent look-ups of one reference with
// the same credentials share one registry request, and a per-registry circuit
// breaker stops a failing registry from being hammered. Only hosts the
// Options.Registries policy allows are connected to (pkg/registries), and an
// error tells the registry's host, HTTP status and standard error codes, never
// what the server answered: a reference is a tenant's text and its errors
// become Event notes.
//
// The caller's context bounds only how long the caller waits: the registry
// request runs detached, bounded by Options.RegistryTimeout, so an answer that
// arrives late still fills the cache for the next pod.
//
// What is here: the Inspector, its Options and results (imagearch.go); Pod,
// which looks a pod's images up in parallel, and Intersect (pod.go); the
// answers' cache and their freshness per pull policy (cache.go); the shared,
// detached registry requests (flight.go); the registry look-up itself, index
// or single image (registry.go); the per-registry circuit breakers
// (breaker.go); the credentials, the kubelet's order then ECR (keychain.go);
// and the errors told in apportion's own words (redact.go).
package imagearch

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/jellydator/ttlcache/v3"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/registries"
)

// Defaults of Options.
const (
	DefaultCacheSize       = 10000
	DefaultIfNotPresentTTL = 7 * 24 * time.Hour // the architecture webhook design's ifNotPresentCacheTime: 7d
	DefaultPullAlwaysTTL   = time.Minute
	DefaultFailureTTL      = 15 * time.Second
	DefaultRegistryTimeout = 20 * time.Second
	DefaultBreakerFailures = 5
	DefaultBreakerOpen     = 30 * time.Second
)

// ErrCircuitOpen is wrapped in the error of a look-up skipped because its
// registry's circuit breaker is open.
var ErrCircuitOpen = errors.New("registry circuit breaker open")

// Platform is one os/architecture/variant an image runs on.
type Platform struct{ OS, Architecture, Variant string }

// String is os/architecture[/variant], as docker --platform writes it.
func (p Platform) String() string {
	if p.Variant == "" {
		return p.OS + "/" + p.Architecture
	}
	return p.OS + "/" + p.Architecture + "/" + p.Variant
}

func (p Platform) less(q Platform) bool {
	if p.OS != q.OS {
		return p.OS < q.OS
	}
	if p.Architecture != q.Architecture {
		return p.Architecture < q.Architecture
	}
	return p.Variant < q.Variant
}

// Credentials say whose pull credentials a look-up uses, as the kubelet would.
type Credentials struct {
	Namespace          string
	ServiceAccountName string   // "" means "default"
	ImagePullSecrets   []string // secret names in Namespace
}

// Image is one inspected image reference.
type Image struct {
	Reference string     // as written in the pod spec
	Platforms []Platform // sorted, deduplicated; shared with the cache: do not modify
}

// Result is what a pod's images support.
type Result struct {
	Images        []Image  // in pod order: init containers then containers, each distinct reference once
	Architectures []string // linux architectures every image supports (intersection), sorted; empty when they share none
}

// Options configure an Inspector; zero fields take the defaults.
type Options struct {
	CacheSize       int           // max cached references (default 10000)
	IfNotPresentTTL time.Duration // tags pulled IfNotPresent/Never (default 168h, as the architecture webhook design's 7d)
	PullAlwaysTTL   time.Duration // tags pulled Always (default 1m in DefaultOptions; 0 = not cached, as the design's null)
	FailureTTL      time.Duration // negative cache (default 15s)
	RegistryTimeout time.Duration // bound of one registry look-up, detached from the caller (default 20s)
	BreakerFailures int           // consecutive failures that open a registry's breaker (default 5)
	BreakerOpen     time.Duration // how long an open breaker skips the registry (default 30s)
	// Keychain builds the credentials of one look-up (called on cache misses
	// only); an answer it gave credentials for is cached for the same creds
	// only. Default: the Kubernetes keychain of creds (pull secrets of the
	// pod and its ServiceAccount), then ECR from apportion's own identity,
	// then anonymous; if the Kubernetes part fails, ECR then anonymous.
	Keychain  func(ctx context.Context, creds Credentials) (authn.Keychain, error)
	Transport http.RoundTripper // default remote.DefaultTransport
	// Registries decides which hosts may be connected to (default
	// registries.Default(): loopback, link-local and in-cluster names
	// denied). Every request of a look-up and every address its
	// connections go to is checked, redirects included.
	Registries *registries.Policy

	// Clock decides the freshness of cached answers (default the real clock);
	// tests step a fake one.
	Clock clock.PassiveClock
}

// DefaultOptions are the defaults of every field. New fills any zero field
// with its default except PullAlwaysTTL, where 0 means "not cached" (the
// architecture webhook design's pullAlwaysCacheTime: null): start from DefaultOptions to get 1m.
func DefaultOptions() Options {
	return Options{PullAlwaysTTL: DefaultPullAlwaysTTL}.withDefaults()
}

func (o Options) withDefaults() Options {
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.IfNotPresentTTL <= 0 {
		o.IfNotPresentTTL = DefaultIfNotPresentTTL
	}
	if o.PullAlwaysTTL < 0 {
		o.PullAlwaysTTL = 0
	}
	if o.FailureTTL <= 0 {
		o.FailureTTL = DefaultFailureTTL
	}
	if o.RegistryTimeout <= 0 {
		o.RegistryTimeout = DefaultRegistryTimeout
	}
	if o.BreakerFailures <= 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerOpen <= 0 {
		o.BreakerOpen = DefaultBreakerOpen
	}
	if o.Transport == nil {
		o.Transport = remote.DefaultTransport
	}
	if o.Registries == nil {
		o.Registries = registries.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Inspector looks up image platforms; safe for concurrent use.
type Inspector struct {
	opts     Options
	kube     kubernetes.Interface
	keychain func(ctx context.Context, creds Credentials) (authn.Keychain, error) // the pod's own part (see keychainFor)
	ecr      authn.Keychain

	cache   *ttlcache.Cache[string, *entry]
	flights singleflight.Group
	// slow marks the flights a caller already gave up waiting for: later
	// callers fail at once instead of each waiting its own timeout, so a
	// hanging registry costs a burst one timeout, not one per pod. A mark
	// lives until its flight ends, RegistryTimeout at most.
	slow     *ttlcache.Cache[string, struct{}]
	breakers *breakers
	// warned remembers the credentials whose keychain failure was logged,
	// so a broken ServiceAccount is logged once per hour, not per look-up.
	warned *ttlcache.Cache[string, struct{}]
}

// entry is one cached answer: platforms or the error of the look-up.
type entry struct {
	platforms []Platform
	err       error
	fetched   time.Time
	pinned    bool // digest reference: never stale
}

// New builds an Inspector. kube may be nil (then only the ECR helper and
// anonymous are used).
func New(kube kubernetes.Interface, opts Options) *Inspector {
	opts = opts.withDefaults()
	opts.Transport = opts.Registries.Transport(opts.Transport)
	for _, r := range registries.Reasons {
		metrics.ImageRegistryDeniedTotal.WithLabelValues(string(r))
	}
	i := &Inspector{
		opts: opts,
		kube: kube,
		ecr:  ECRKeychain(),
		cache: ttlcache.New(
			ttlcache.WithCapacity[string, *entry](uint64(opts.CacheSize)),
			ttlcache.WithDisableTouchOnHit[string, *entry](),
		),
		breakers: newBreakers(opts),
		slow: ttlcache.New(
			ttlcache.WithCapacity[string, struct{}](uint64(opts.CacheSize)),
			ttlcache.WithTTL[string, struct{}](opts.RegistryTimeout),
			ttlcache.WithDisableTouchOnHit[string, struct{}](),
		),
		warned: ttlcache.New(
			ttlcache.WithCapacity[string, struct{}](1024),
			ttlcache.WithTTL[string, struct{}](time.Hour),
			ttlcache.WithDisableTouchOnHit[string, struct{}](),
		),
	}
	i.keychain = opts.Keychain
	if i.keychain == nil {
		i.keychain = i.podKeychain
	}
	return i
}

// Len is the number of cached references (for the cache-size metric and tests).
func (i *Inspector) Len() int {
	i.cache.DeleteExpired()
	n := i.cache.Len()
	metrics.ImageCacheEntries.Set(float64(n))
	return n
}

// Platforms returns the platforms of one reference, from the cache or the
// registry. The slice is shared with the cache: do not modify it. ctx bounds
// the wait only; the registry request goes on after ctx ends and fills the
// cache.
func (i *Inspector) Platforms(ctx context.Context, ref string, policy corev1.PullPolicy, creds Credentials) ([]Platform, error) {
	if e := i.cached(ref, policy); e != nil {
		return e.platforms, e.err
	}
	key := flightKey(ref, creds)
	if e := i.cachedFor(key, ref, policy); e != nil {
		return e.platforms, e.err
	}
	if err := i.slowFlight(key, ref); err != nil {
		return nil, err
	}
	return i.wait(ctx, key, ref, i.start(ctx, key, ref, policy, creds))
}
