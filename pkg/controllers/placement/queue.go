package placement

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// oldestFirst enqueues gated pods so that the oldest is decided first: a new
// leader finds every pod admitted since the old one died waiting, and taking
// them in the order they came bounds the longest gate wait by the takeover
// plus a moment, instead of by the takeover plus the whole backlog (the
// informer lists them in no particular order). A pod's priority is minus its
// creation time in seconds; within one second the queue is first in, first
// out, and a requeued pod keeps its priority.
type oldestFirst struct{}

var _ handler.EventHandler = oldestFirst{}

func (oldestFirst) Create(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	enqueueByAge(q, e.Object)
}

func (oldestFirst) Update(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	enqueueByAge(q, e.ObjectNew)
}

// Delete enqueues nothing: a pod gone needs no decision.
func (oldestFirst) Delete(context.Context, event.DeleteEvent, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
}

func (oldestFirst) Generic(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	enqueueByAge(q, e.Object)
}

func enqueueByAge(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		q.Add(req)
		return
	}
	priority := -int(o.GetCreationTimestamp().Unix())
	pq.AddWithOpts(priorityqueue.AddOpts{Priority: &priority}, req)
}
