package placement

import (
	"context"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/test"
)

// TestManagerReadsThePodFromTheInformerStore: the reconciler the manager
// runs reads each pod from the pod informer's store, not through the
// client (whose Get would give a deep copy; here, with the cache not
// started, an error). Nothing is started: no API server is needed.
func TestManagerReadsThePodFromTheInformerStore(t *testing.T) {
	m, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Scheme:  test.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
			rm := meta.NewDefaultRESTMapper(nil)
			rm.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
			return rm, nil
		},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
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
