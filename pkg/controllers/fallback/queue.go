package fallback

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// podQueue is a first-in first-out queue of pod names that holds each name
// once: a pod queued again before its turn keeps its place.
type podQueue struct {
	mu     sync.Mutex
	items  []types.NamespacedName
	queued map[types.NamespacedName]struct{}
	ready  chan struct{} // one token while items may be non-empty
}

func newPodQueue() *podQueue {
	return &podQueue{queued: map[types.NamespacedName]struct{}{}, ready: make(chan struct{}, 1)}
}

func (q *podQueue) add(name types.NamespacedName) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.queued[name]; ok {
		return
	}
	q.queued[name] = struct{}{}
	q.items = append(q.items, name)
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// tryPop returns the next name, if any, without waiting.
func (q *podQueue) tryPop() (types.NamespacedName, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return types.NamespacedName{}, false
	}
	name := q.items[0]
	q.items[0] = types.NamespacedName{}
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items = nil // let the backing array go
	}
	delete(q.queued, name)
	return name, true
}

// pop waits for the next name; false once ctx ends.
func (q *podQueue) pop(ctx context.Context) (types.NamespacedName, bool) {
	for {
		if name, ok := q.tryPop(); ok {
			return name, true
		}
		select {
		case <-ctx.Done():
			return types.NamespacedName{}, false
		case <-q.ready:
		}
	}
}

func (q *podQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}
