package placement

import (
	"sync"

	"k8s.io/utils/keymutex"
)

// revisionLocks is how many mutexes the revisions hash onto. A decision
// holds one at a time, so two revisions sharing a mutex only wait for each
// other, never deadlock; with MaxConcurrentReconciles (4) workers that is
// rare at this size, and the memory is fixed whatever the number of
// revisions.
const revisionLocks = 256

// keyedMutex serialises decisions per revision while different workloads
// proceed in parallel. Its zero value is ready to use.
type keyedMutex struct {
	once sync.Once
	km   keymutex.KeyMutex
}

func (k *keyedMutex) lock(key string) func() {
	k.once.Do(func() { k.km = keymutex.NewHashed(revisionLocks) })
	k.km.LockKey(key)
	return func() { _ = k.km.UnlockKey(key) }
}
