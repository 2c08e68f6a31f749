package podcache

import (
	"runtime"
	"sync"
	"weak"
)

// table interns values by a canonical key: equal keys give one shared *V for
// as long as some cached pod holds it. The table holds its values weakly, so
// a value no pod uses any more (the pods of an old ReplicaSet gone) is
// collected and its entry removed; a strong map would grow with every
// rollout for the life of the process.
type table[V any] struct {
	mu sync.Mutex
	m  map[string]weak.Pointer[V]
}

func newTable[V any]() *table[V] {
	return &table[V]{m: map[string]weak.Pointer[V]{}}
}

// get returns the value interned under key, or the one build makes, which
// is interned from then on. key is not kept: the caller may reuse it.
func (t *table[V]) get(key []byte, build func() *V) *V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wp, ok := t.m[string(key)]; ok {
		if v := wp.Value(); v != nil {
			return v
		}
	}
	v := build()
	k := string(key)
	t.m[k] = weak.Make(v)
	runtime.AddCleanup(v, t.drop, k)
	return v
}

// drop removes the entry of a collected value, unless the key was interned
// again since.
func (t *table[V]) drop(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wp, ok := t.m[key]; ok && wp.Value() == nil {
		delete(t.m, key)
	}
}
