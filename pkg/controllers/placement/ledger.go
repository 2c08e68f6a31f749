package placement

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ledger remembers decisions this process patched but the informer has not
// shown yet. Counting from the cache alone would miss them during a burst and
// send the next pods to the same group; the ledger closes that gap. An entry
// is dropped once the cache shows the pod's decision, or after maxAge (the pod
// was deleted before the cache caught up).
type ledger struct {
	mu      sync.Mutex
	entries map[types.UID]ledgerEntry
}

type ledgerEntry struct {
	group string
	at    time.Time
}

const ledgerMaxAge = 10 * time.Minute

func newLedger() *ledger { return &ledger{entries: map[types.UID]ledgerEntry{}} }

func (l *ledger) record(uid types.UID, group string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries[uid] = ledgerEntry{group: group, at: now}
}

func (l *ledger) get(uid types.UID) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[uid]
	return e.group, ok
}

// expire drops entries older than maxAge.
func (l *ledger) expire(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, e := range l.entries {
		if now.Sub(e.at) > ledgerMaxAge {
			delete(l.entries, uid)
		}
	}
}

// keyedMutex serialises decisions per revision while different workloads
// proceed in parallel.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	sync.Mutex
	users int
}

func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
