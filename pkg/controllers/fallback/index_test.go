package fallback

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/test"
)

// podAPI serves pods as much of the API as a pod informer reads: a list,
// and a watch that stays quiet. A streamed list (sendInitialEvents) is
// refused, as by an API server that does not serve it: the informer lists.
func podAPI(tb testing.TB, pods []*corev1.Pod) *rest.Config {
	tb.Helper()
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	body, err := json.Marshal(list)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/pods" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		switch {
		case q.Get("sendInitialEvents") == "true":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}`))
		case q.Get("watch") == "true":
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			_, _ = w.Write(body)
		}
	}))
	tb.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

// informerCache is controller-runtime's informer cache of pods served by
// podAPI, storing them compacted as the operator's cache does, with c's
// index added; and a client that reads through it. It is synced when
// returned.
func informerCache(tb testing.TB, c *Controller, pods []*corev1.Pod) client.Client {
	tb.Helper()
	cfg := podAPI(tb, pods)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	informers, err := cache.New(cfg, cache.Options{Scheme: test.Scheme(), Mapper: mapper, ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Transform: func(o any) (any, error) { return podcache.Compact(o.(*corev1.Pod)), nil }},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	if err := c.indexPods(ctx, informers); err != nil {
		tb.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		tb.Fatal("the pod cache did not sync")
	}
	kube, err := client.New(cfg, client.Options{Scheme: test.Scheme(), Mapper: mapper, Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		tb.Fatal(err)
	}
	return kube
}

// poolPods are n pending pods of pool in namespace, decided and signed.
func poolPods(namespace, pool string, n int) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		p := pendingPod(fmt.Sprintf("%s-%d", pool, i), pool, now)
		p.Namespace = namespace
		p.UID = types.UID(fmt.Sprintf("%s-%s-%d", namespace, pool, i))
		pods[i] = sign(p)
	}
	return pods
}

func newQueue() workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
}

// A bad NodePool brings back its pending pods of every namespace, and only
// those, as the listing through the cache did; read from the informer's
// index, they are not listed at all.
func TestAPoolsPendingPodsAreQueuedFromTheIndex(t *testing.T) {
	pods := append(append(poolPods("web", "spot", 3), poolPods("tenant", "spot", 2)...), poolPods("web", "od", 2)...)
	unsigned := pendingPod("forged", "spot", now)
	unsigned.Annotations[annotations.Signature] = "forged"
	pods = append(pods, unsigned)
	c := NewController(nil, nil, nil, nil, Options{Signer: testSigner})
	kube := informerCache(t, c, pods)
	if c.podIndexer == nil {
		t.Fatal("the informer's index by capacity key is not read: every NodePool event copies the pool's pods")
	}
	c.kubeClient = kube
	q := newQueue()
	defer q.ShutDown()
	c.enqueuePool(context.Background(), "spot", q)
	got := sets.New[types.NamespacedName]()
	for q.Len() > 0 {
		r, _ := q.Get()
		got.Insert(r.NamespacedName)
		q.Done(r)
	}
	want := sets.New[types.NamespacedName]()
	for _, p := range pods[:5] {
		want.Insert(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
	}
	if !got.Equal(want) {
		t.Errorf("queued %v, want the signed pending pods of spot %v", got.UnsortedList(), want.UnsortedList())
	}
}

// A NodePool's pending pods are a burst's worth when it goes bad: queuing
// them must not copy each pod.
func TestQueuingAPoolDoesNotCopyItsPods(t *testing.T) {
	const n = 500
	c := NewController(nil, nil, nil, nil, Options{Signer: testSigner})
	c.kubeClient = informerCache(t, c, poolPods("web", "spot", n))
	q := newQueue()
	defer q.ShutDown()
	ctx := context.Background()
	c.enqueuePool(ctx, "spot", q)
	if q.Len() != n {
		t.Fatalf("%d pods queued, want %d", q.Len(), n)
	}
	if allocs := testing.AllocsPerRun(5, func() { c.enqueuePool(ctx, "spot", q) }); allocs >= n {
		t.Errorf("queuing %d pods allocates %v times: each pod is copied", n, allocs)
	}
}

// BenchmarkEnqueuePool queues the 2,000 pending pods of a NodePool that
// went bad, among 2,000 of another.
func BenchmarkEnqueuePool(b *testing.B) {
	c := NewController(nil, nil, nil, nil, Options{Signer: testSigner})
	c.kubeClient = informerCache(b, c, append(poolPods("web", "spot", 2000), poolPods("web", "od", 2000)...))
	q := newQueue()
	defer q.ShutDown()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c.enqueuePool(ctx, "spot", q)
	}
	if q.Len() != 2000 {
		b.Fatalf("%d pods queued, want 2000", q.Len())
	}
}
