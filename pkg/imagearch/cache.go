package imagearch

import (
	"strings"
	"time"

	"github.com/jellydator/ttlcache/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/metrics"
)

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

// flightKey names a look-up of ref with creds. Answers that depend on the
// credentials (401, 403, 404: a private image seen without the right pull
// secret; whatever was read with the pod's own pull secrets, on any
// registry, ECR included) are cached under it, so that one namespace's
// missing secret does not become another's failure, and a private image's
// platforms reach only the pods whose credentials read them; concurrent
// look-ups with the same credentials (the pods of one workload) share one
// request, those with other credentials never do.
func flightKey(ref string, creds Credentials) string {
	return ref + "\x00" + creds.Namespace + "/" + creds.ServiceAccountName + "/" + strings.Join(creds.ImagePullSecrets, ",")
}

// cachedFor returns the fresh credential-dependent answer cached under key:
// a refusal, or platforms read with those credentials.
func (i *Inspector) cachedFor(key, ref string, policy corev1.PullPolicy) *entry {
	it := i.cache.Get(key)
	if it == nil || !i.fresh(it.Value(), ref, policy) {
		return nil
	}
	if it.Value().err != nil {
		lookupError.Inc()
	} else {
		lookupHit.Inc()
	}
	return it.Value()
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
