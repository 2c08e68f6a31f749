// Package capacity remembers which NodePools (Karpenter mode) or groups'
// label sets (node-label mode) cannot get capacity right now, so that
// placement leaves them out of the split for a while. The detector that marks
// them is pkg/controllers/capacity.
package capacity

import (
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Key names what can be out of capacity: a NodePool (Karpenter mode) or a
// group's label set (node-label mode).
type Key string

const (
	poolPrefix   = "nodepool/"
	labelsPrefix = "labels/"
)

// Kinds of keys (values of the metrics' kind label).
const (
	KindNodePool = "nodepool"
	KindLabels   = "labels"
)

// PoolKey is the key of a NodePool.
func PoolKey(nodePool string) Key { return Key(poolPrefix + nodePool) }

// LabelsKey is the key of a group in node-label mode; groupKey is the group's
// labels as key=value joined by "," (strategy.Group.Key, the
// apportion.dev/group annotation).
func LabelsKey(groupKey string) Key { return Key(labelsPrefix + groupKey) }

// Kind is KindNodePool or KindLabels, "" for a key built otherwise.
func (k Key) Kind() string {
	switch {
	case strings.HasPrefix(string(k), poolPrefix):
		return KindNodePool
	case strings.HasPrefix(string(k), labelsPrefix):
		return KindLabels
	}
	return ""
}

// Name is the NodePool name or the group key, without the kind prefix.
func (k Key) Name() string {
	switch k.Kind() {
	case KindNodePool:
		return string(k[len(poolPrefix):])
	case KindLabels:
		return string(k[len(labelsPrefix):])
	}
	return string(k)
}

// Tracker remembers unavailable keys, each for a TTL that doubles each time
// the key is marked again shortly after it came back (strikes), capped at
// MaxTTL; strikes reset after the key stayed available for MaxTTL. It is safe
// for concurrent use; Unavailable does not allocate.
//
// With ttl 3m and maxTTL 30m, a NodePool marked at 0:00 is out until 0:03;
// marked again at 0:05 (2m after it came back, less than maxTTL) it is out
// for 6m, until 0:11; then 12m, 24m, and 30m for every later strike. If it
// stays available from 0:11 to 0:41 (maxTTL), the next marking is out for 3m
// again.
type Tracker struct {
	clock  clock.PassiveClock
	ttl    time.Duration
	maxTTL time.Duration

	mu   sync.RWMutex
	keys map[Key]entry
}

type entry struct {
	until   time.Time // end of the current outage, or of the last one
	reason  string
	strikes int // markings in a row, each shortly after the previous outage ended
}

// NewTracker returns a Tracker whose first outage of a key lasts ttl, and no
// outage more than maxTTL (raised to ttl if smaller).
func NewTracker(clk clock.PassiveClock, ttl, maxTTL time.Duration) *Tracker {
	if maxTTL < ttl {
		maxTTL = ttl
	}
	return &Tracker{clock: clk, ttl: ttl, maxTTL: maxTTL, keys: map[Key]entry{}}
}

// Mark makes key unavailable; it returns until when, and whether the key was
// available before (so that Events and metrics are emitted once per outage).
// Marking a key that is already unavailable does not extend it.
func (t *Tracker) Mark(key Key, reason string) (until time.Time, newly bool) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e, seen := t.keys[key]
	if seen && now.Before(e.until) {
		return e.until, false
	}
	if seen && now.Sub(e.until) < t.maxTTL {
		e.strikes++
	} else {
		e.strikes = 0
	}
	e.until, e.reason = now.Add(t.backoff(e.strikes)), reason
	t.keys[key] = e
	return e.until, true
}

// backoff is ttl doubled strikes times, capped at maxTTL.
func (t *Tracker) backoff(strikes int) time.Duration {
	d := t.ttl
	for i := 0; i < strikes && d < t.maxTTL; i++ {
		d *= 2
	}
	return min(d, t.maxTTL)
}

// Unavailable reports whether key is out now, with the reason and until
// when. When the key is available, until is when its last outage ended (zero
// if it never was out), so that a detector can ignore evidence older than
// that.
func (t *Tracker) Unavailable(key Key) (out bool, reason string, until time.Time) {
	now := t.clock.Now()
	t.mu.RLock()
	e, seen := t.keys[key]
	t.mu.RUnlock()
	if !seen {
		return false, "", time.Time{}
	}
	if now.Before(e.until) {
		return true, e.reason, e.until
	}
	return false, "", e.until
}

// Snapshot lists the keys out now with until when. It also forgets keys
// that have been available for maxTTL (their strikes are reset anyway).
func (t *Tracker) Snapshot() map[Key]time.Time {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[Key]time.Time)
	for k, e := range t.keys {
		switch {
		case now.Before(e.until):
			out[k] = e.until
		case now.Sub(e.until) >= t.maxTTL:
			delete(t.keys, k)
		}
	}
	return out
}
