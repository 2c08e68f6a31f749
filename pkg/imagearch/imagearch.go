// Package imagearch reads which platforms a pod's images run on from their
// registries, as the kubelet would pull them: an OCI index or Docker manifest
// list gives its manifests' platforms, a single image its config's
// os/architecture/variant. Answers are cached by the reference as written
// (digest-pinned references for good, tags by their pull policy's TTL,
// failures briefly), concurrent look-ups of one reference share one registry
// request, and a per-registry circuit breaker stops a failing registry from
// being hammered. Only hosts the Options.Registries policy allows are
// connected to (pkg/registries), and an error tells the registry's host,
// HTTP status and standard error codes, never what the server answered: a
// reference is a tenant's text and its errors become Event notes.
//
// The caller's context bounds only how long the caller waits: the registry
// request runs detached, bounded by Options.RegistryTimeout, so an answer that
// arrives late still fills the cache for the next pod.
package imagearch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
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
	DefaultIfNotPresentTTL = 7 * 24 * time.Hour // seed 002's ifNotPresentCacheTime: 7d
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
	IfNotPresentTTL time.Duration // tags pulled IfNotPresent/Never (default 168h, seed 002's ifNotPresentCacheTime 7d)
	PullAlwaysTTL   time.Duration // tags pulled Always (default 1m in DefaultOptions; 0 = not cached, seed 002's null)
	FailureTTL      time.Duration // negative cache (default 15s)
	RegistryTimeout time.Duration // bound of one registry look-up, detached from the caller (default 20s)
	BreakerFailures int           // consecutive failures that open a registry's breaker (default 5)
	BreakerOpen     time.Duration // how long an open breaker skips the registry (default 30s)
	// Keychain builds the credentials of one look-up (called on cache misses
	// only). Default: the Kubernetes keychain of creds (pull secrets of the
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
// with its default except PullAlwaysTTL, where 0 means "not cached" (seed
// 002's pullAlwaysCacheTime: null): start from DefaultOptions to get 1m.
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
	keychain func(ctx context.Context, creds Credentials) (authn.Keychain, error)
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
		i.keychain = i.defaultKeychain
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

// flightKey names a look-up of ref with creds. Answers that depend on the
// credentials (401, 403, 404: a private image seen without the right pull
// secret) are cached under it, so that one namespace's missing secret does
// not become another's failure; concurrent look-ups with the same
// credentials (the pods of one workload) share one request.
func flightKey(ref string, creds Credentials) string {
	return ref + "\x00" + creds.Namespace + "/" + creds.ServiceAccountName + "/" + strings.Join(creds.ImagePullSecrets, ",")
}

// cachedFor returns the fresh credential-dependent failure cached under key.
func (i *Inspector) cachedFor(key, ref string, policy corev1.PullPolicy) *entry {
	it := i.cache.Get(key)
	if it == nil || !i.fresh(it.Value(), ref, policy) {
		return nil
	}
	lookupError.Inc()
	return it.Value()
}

// slowFlight fails at once when a caller already timed out waiting for the
// look-up under key, which is still running.
func (i *Inspector) slowFlight(key, ref string) error {
	if !i.slow.Has(key) {
		return nil
	}
	lookupError.Inc()
	return fmt.Errorf("inspecting image %s: %w", ref, ErrSlowRegistry)
}

// ErrSlowRegistry is wrapped when a look-up is skipped because an earlier
// caller already waited its whole timeout for the same, still running,
// registry request.
var ErrSlowRegistry = errors.New("the registry has not answered within the image timeout; a look-up is still under way")

var (
	lookupHit   = metrics.ImageLookupsTotal.WithLabelValues("hit")
	lookupMiss  = metrics.ImageLookupsTotal.WithLabelValues("miss")
	lookupError = metrics.ImageLookupsTotal.WithLabelValues("error")
)

// cached returns the fresh cached answer for ref under policy, or nil. It
// does not parse ref and does not allocate.
func (i *Inspector) cached(ref string, policy corev1.PullPolicy) *entry {
	it := i.cache.Get(ref)
	if it == nil {
		return nil
	}
	e := it.Value()
	if !i.fresh(e, ref, policy) {
		return nil
	}
	if e.err != nil {
		lookupError.Inc()
	} else {
		lookupHit.Inc()
	}
	return e
}

// fresh says whether a caller pulling ref with policy may use e: a failure
// for FailureTTL, a digest for good, a tag for its policy's TTL.
func (i *Inspector) fresh(e *entry, ref string, policy corev1.PullPolicy) bool {
	age := i.opts.Clock.Since(e.fetched)
	switch {
	case e.err != nil:
		return age < i.opts.FailureTTL
	case e.pinned:
		return true
	default:
		ttl := i.tagTTL(ref, policy)
		return ttl > 0 && age < ttl
	}
}

func (i *Inspector) tagTTL(ref string, policy corev1.PullPolicy) time.Duration {
	if policy == "" {
		policy = defaultPullPolicy(ref)
	}
	if policy == corev1.PullAlways {
		return i.opts.PullAlwaysTTL
	}
	return i.opts.IfNotPresentTTL
}

// defaultPullPolicy is the API server's default: Always for :latest or no
// tag, IfNotPresent otherwise.
func defaultPullPolicy(ref string) corev1.PullPolicy {
	if isPinned(ref) {
		return corev1.PullIfNotPresent
	}
	name := ref[strings.LastIndexByte(ref, '/')+1:]
	if j := strings.LastIndexByte(name, ':'); j >= 0 && name[j+1:] != "latest" {
		return corev1.PullIfNotPresent
	}
	return corev1.PullAlways
}

func isPinned(ref string) bool { return strings.Contains(ref, "@") }

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
// ref, or under key when the answer depends on the credentials.
func (i *Inspector) fetch(ctx context.Context, key, ref string, creds Credentials) *entry {
	ctx, cancel := context.WithTimeout(ctx, i.opts.RegistryTimeout)
	defer cancel()
	e := &entry{pinned: isPinned(ref)}
	e.platforms, e.err = i.lookup(ctx, ref, creds)
	e.fetched = i.opts.Clock.Now()
	if e.err != nil {
		e.err = fmt.Errorf("inspecting image %s: %w", ref, e.err)
		if errors.Is(e.err, ErrCircuitOpen) {
			return e
		}
		if d := (*registries.DeniedError)(nil); errors.As(e.err, &d) {
			metrics.ImageRegistryDeniedTotal.WithLabelValues(string(d.Reason)).Inc()
		} else if isImageError(e.err) {
			i.put(key, e)
			return e
		}
	}
	i.put(ref, e)
	return e
}

// put caches e: a failure for FailureTTL, a digest until the size bound
// evicts it, a tag as long as the longest policy TTL may use it (fresh decides
// per caller).
func (i *Inspector) put(ref string, e *entry) {
	var ttl time.Duration
	switch {
	case e.err != nil:
		ttl = i.opts.FailureTTL
	case e.pinned:
		ttl = ttlcache.NoTTL
	default:
		ttl = max(i.opts.IfNotPresentTTL, i.opts.PullAlwaysTTL)
	}
	i.cache.Set(ref, e, ttl)
	i.cache.DeleteExpired()
	metrics.ImageCacheEntries.Set(float64(i.cache.Len()))
}

// Pod inspects every container and init container image of the pod with the
// pod's credentials (namespace, spec.serviceAccountName, spec.imagePullSecrets)
// and the containers' imagePullPolicy. Any image failing makes the whole call
// fail (the error names the container and image). The look-ups of the pod's
// images run in parallel.
func (i *Inspector) Pod(ctx context.Context, pod *corev1.Pod) (*Result, error) {
	creds := Credentials{Namespace: pod.Namespace, ServiceAccountName: pod.Spec.ServiceAccountName}
	for _, s := range pod.Spec.ImagePullSecrets {
		if s.Name != "" {
			creds.ImagePullSecrets = append(creds.ImagePullSecrets, s.Name)
		}
	}
	type pending struct {
		container string
		key       string
		hit       *entry // cached answer, already counted
		slow      error  // ErrSlowRegistry, already counted
		ch        <-chan singleflight.Result
	}
	res := &Result{}
	var waits []pending
	seen := make(map[string]struct{}, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	visit := func(c *corev1.Container) {
		if _, ok := seen[c.Image]; ok {
			return
		}
		seen[c.Image] = struct{}{}
		res.Images = append(res.Images, Image{Reference: c.Image})
		p := pending{container: c.Name}
		if p.hit = i.cached(c.Image, c.ImagePullPolicy); p.hit == nil {
			p.key = flightKey(c.Image, creds)
			switch p.hit = i.cachedFor(p.key, c.Image, c.ImagePullPolicy); {
			case p.hit != nil:
			case i.slow.Has(p.key):
				p.slow = i.slowFlight(p.key, c.Image)
			default:
				p.ch = i.start(ctx, p.key, c.Image, c.ImagePullPolicy, creds)
			}
		}
		waits = append(waits, p)
	}
	for k := range pod.Spec.InitContainers {
		visit(&pod.Spec.InitContainers[k])
	}
	for k := range pod.Spec.Containers {
		visit(&pod.Spec.Containers[k])
	}
	for k, w := range waits {
		var ps []Platform
		var err error
		switch {
		case w.hit != nil:
			ps, err = w.hit.platforms, w.hit.err
		case w.slow != nil:
			err = w.slow
		default:
			ps, err = i.wait(ctx, w.key, res.Images[k].Reference, w.ch)
		}
		if err != nil {
			return nil, fmt.Errorf("container %q: %w", w.container, err)
		}
		res.Images[k].Platforms = ps
	}
	res.Architectures = Intersect(res.Images)
	return res, nil
}

// Intersect returns the linux architectures every image runs on, sorted;
// empty (not nil) when they share none.
func Intersect(images []Image) []string {
	archs := []string{}
	if len(images) == 0 {
		return archs
	}
	for _, p := range images[0].Platforms {
		if p.OS == "linux" && !contains(archs, p.Architecture) {
			archs = append(archs, p.Architecture)
		}
	}
	for _, img := range images[1:] {
		kept := archs[:0]
		for _, a := range archs {
			if supports(img.Platforms, a) {
				kept = append(kept, a)
			}
		}
		archs = kept
	}
	sort.Strings(archs)
	return archs
}

func supports(ps []Platform, arch string) bool {
	for _, p := range ps {
		if p.OS == "linux" && p.Architecture == arch {
			return true
		}
	}
	return false
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
