package policy

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestRequeue: a created or deleted object requeues the policies named for
// it, an updated one only when changed says so; a failed listing requeues
// nothing.
func TestRequeue(t *testing.T) {
	ctx := context.Background()
	var fail bool
	h := Requeue(0, LabelsChanged, func(_ context.Context, obj client.Object) ([]reconcile.Request, error) {
		if fail {
			return nil, errors.New("cache gone")
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: "p"}}}, nil
	})
	obj := func(labels map[string]string) client.Object {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Labels: labels}}
	}
	for _, tc := range []struct {
		name  string
		send  func(q workqueue.TypedRateLimitingInterface[reconcile.Request])
		fail  bool
		queue int
	}{
		{name: "create", queue: 1, send: func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, event.CreateEvent{Object: obj(nil)}, q)
		}},
		{name: "delete", queue: 1, send: func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, event.DeleteEvent{Object: obj(nil)}, q)
		}},
		{name: "update, labels changed", queue: 1, send: func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: obj(nil), ObjectNew: obj(map[string]string{"a": "b"})}, q)
		}},
		{name: "update, nothing changed", send: func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: obj(nil), ObjectNew: obj(nil)}, q)
		}},
		{name: "listing fails", fail: true, send: func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, event.CreateEvent{Object: obj(nil)}, q)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fail = tc.fail
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			tc.send(q)
			if q.Len() != tc.queue {
				t.Errorf("%d requests queued, want %d", q.Len(), tc.queue)
			}
		})
	}
}
