package placement

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestOldestPodFirst: pods enqueued in any order come out oldest first, as
// a new leader's backlog should be decided.
func TestOldestPodFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("placement-test")
	defer q.ShutDown()
	base := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	pod := func(name string, age time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name, CreationTimestamp: metav1.NewTime(base.Add(-age))}}
	}
	h := oldestFirst{}
	ctx := context.Background()
	h.Create(ctx, event.CreateEvent{Object: pod("middle", 10*time.Second)}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: pod("newest", time.Second), ObjectNew: pod("newest", time.Second)}, q)
	h.Create(ctx, event.CreateEvent{Object: pod("oldest", time.Minute)}, q)
	h.Delete(ctx, event.DeleteEvent{Object: pod("gone", time.Hour)}, q)
	var got []string
	for range 3 {
		item, _ := q.Get()
		got = append(got, item.Name)
		q.Done(item)
	}
	if want := []string{"oldest", "middle", "newest"}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("order %v, want %v", got, want)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("%d more items queued; a deleted pod needs no decision", n)
	}
}
