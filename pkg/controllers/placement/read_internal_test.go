package placement

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/test"
)

// TestManagerReadsThePodFromTheInformerStore: the reconciler the manager
// runs reads each pod from the pod informer's store, not through the
// client (whose Get would give a deep copy; here, with the cache not
// started, an error). Nothing is started: no API server is needed.
func TestManagerReadsThePodFromTheInformerStore(t *testing.T) {
	m := test.UnstartedManager(t, []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Pod")})
	ctx := context.Background()
	// The pods are not listed yet: a gated pod read is sent back for later,
	// which tells that it was read, and nothing more is needed.
	tally := NewTally()
	tally.SetSynced(func() bool { return false })
	c := NewController(clocktesting.NewFakeClock(time.Now()), m.GetClient(), nil, nil, tally, time.Minute)
	r, err := c.reconciler(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	inf, err := m.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc-000", UID: "pod-0"}, Gated: true})
	if err := inf.(toolscache.SharedIndexInformer).GetStore().Add(podcache.Compact(pod)); err != nil {
		t.Fatal(err)
	}
	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: "nginx-abc-000"}})
	if err != nil || res.RequeueAfter != 100*time.Millisecond {
		t.Fatalf("Reconcile = %+v, %v; want the pod read from the store and sent back until the pods are listed", res, err)
	}
	res, err = r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: "gone"}})
	if err != nil || res != (reconcile.Result{}) {
		t.Fatalf("a pod not in the store: Reconcile = %+v, %v; want nothing to do", res, err)
	}
}
