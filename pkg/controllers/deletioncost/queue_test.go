package deletioncost

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// recordingQueue records what EventHandler enqueues; the debounce is not
// waited for.
type recordingQueue struct {
	Queue // nil: only Add and AddAfter are called
	added []reconcile.Request
	after []time.Duration
}

func (q *recordingQueue) Add(r reconcile.Request) { q.AddAfter(r, 0) }

func (q *recordingQueue) AddAfter(r reconcile.Request, d time.Duration) {
	q.added = append(q.added, r)
	q.after = append(q.after, d)
}

// take returns the requests recorded since the last call.
func (q *recordingQueue) take() []reconcile.Request {
	out := q.added
	q.added, q.after = nil, nil
	return out
}
