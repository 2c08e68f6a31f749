// Package capacity remembers which NodePools (Karpenter mode) or groups'
// label sets (node-label mode) cannot get capacity right now, so that
// placement leaves them out of the split for a while, and reads Karpenter's
// own account of why a pod got no node (its Events). The detector that marks
// them is pkg/controllers/fallback.
//
// An outage has a scope. Evidence about a NodePool that its own state backs
// (its limits, readiness, launch failures) marks the pool out for every
// workload (PoolKey). Evidence from one workload's pods alone (they stayed
// unschedulable and Karpenter launched nothing for them) marks the pool out
// for that workload only (Scoped), so that nothing a tenant writes reaches
// another workload.
//
// Capacity is the one answer to "which groups of a strategy can be served
// now, and how" that the placement, rebalance and policy-status controllers
// share (pools.go): NodePoolCapacity from the cached NodePools (Karpenter
// mode), NodeLabelCapacity from the nodes' labels (node-label mode), each
// leaving out what the Tracker marks out; OnLabelChange is the informer
// handler that tells them, and the placement tally, that nodes changed.
//
// NodePoolCapacity also leaves out, before any pod is placed there, a
// NodePool whose own state shows it cannot take a pod (full.go): its limits
// leave no room for a new node and it has no node. The limits rule
// (limits.go: LimitsBacked, Usage) and what the cluster shows of the
// instance types a NodePool allows (instancetypes.go: AllowedTypes) are
// the ones the detector applies to Karpenter's limits findings.
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
	scopePrefix  = "workload/"
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

// Scoped is key for one workload only: scope is the workload's UID (no "/"
// in it), so an outage of the scoped key leaves every other workload alone.
// An empty scope gives key itself.
func Scoped(scope string, key Key) Key {
	if scope == "" || strings.Contains(scope, "/") {
		return key
	}
	return Key(scopePrefix + scope + "/" + string(key.Base()))
}

// Scope is the workload a scoped key belongs to, "" for a cluster-wide key.
func (k Key) Scope() string {
	rest, ok := strings.CutPrefix(string(k), scopePrefix)
	if !ok {
		return ""
	}
	scope, _, _ := strings.Cut(rest, "/")
	return scope
}

// Base is the cluster-wide key of a scoped key (the key itself otherwise).
func (k Key) Base() Key {
	rest, ok := strings.CutPrefix(string(k), scopePrefix)
	if !ok {
		return k
	}
	_, base, _ := strings.Cut(rest, "/")
	return Key(base)
}

// Kind is KindNodePool or KindLabels (of the base key for a scoped one), ""
// for a key built otherwise.
func (k Key) Kind() string {
	switch b := string(k.Base()); {
	case strings.HasPrefix(b, poolPrefix):
		return KindNodePool
	case strings.HasPrefix(b, labelsPrefix):
		return KindLabels
	}
	return ""
}

// Name is the NodePool name or the group key, without the kind prefix or
// the scope.
func (k Key) Name() string {
	b := k.Base()
	switch b.Kind() {
	case KindNodePool:
		return string(b[len(poolPrefix):])
	case KindLabels:
		return string(b[len(labelsPrefix):])
	}
	return string(b)
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

// Extend keeps key out for another outage of its current length when the
// evidence that marked it still holds at its end, so that no pod has to be
// sent to it to find out again. It returns the new end; a key that is not
// out is not changed (zero time).
func (t *Tracker) Extend(key Key, reason string) time.Time {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e, seen := t.keys[key]
	if !seen || !now.Before(e.until) {
		return time.Time{}
	}
	e.until, e.reason = now.Add(t.backoff(e.strikes)), reason
	t.keys[key] = e
	return e.until
}

// Lift ends key's outage now, when the evidence that marked it is gone (a
// limit raised, the NodePool Ready again). A later mark counts as a strike,
// as after an outage that ran its course. It reports whether key was out.
func (t *Tracker) Lift(key Key) bool {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e, seen := t.keys[key]
	if !seen || !now.Before(e.until) {
		return false
	}
	e.until = now
	t.keys[key] = e
	return true
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

// ScopedOut lists the keys of base for one workload each (Scoped) that are
// out now, with their reasons: what to check again when base's NodePool
// changes. It reads every key: for NodePool changes, not for decisions.
func (t *Tracker) ScopedOut(base Key) map[Key]string {
	now := t.clock.Now()
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out map[Key]string
	for k, e := range t.keys {
		if k.Scope() == "" || k.Base() != base || !now.Before(e.until) {
			continue
		}
		if out == nil {
			out = map[Key]string{}
		}
		out[k] = e.reason
	}
	return out
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
