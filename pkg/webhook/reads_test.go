package webhook

import (
	"context"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/test"
)

// countingReader counts the Get calls made through it, by kind.
type countingReader struct {
	client.Reader
	mu   sync.Mutex
	gets map[string]int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if kind == "" {
		if gvk, err := apiutil.GVKForObject(obj, test.Scheme()); err == nil {
			kind = gvk.Kind
		}
	}
	r.mu.Lock()
	r.gets[kind]++
	r.mu.Unlock()
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestPodMutatorReadsEachOwnerOnce: one admission reads each object of the
// pod's owner chain (and its namespace, when architecture opt-in asks for
// it) from the cache at most once, whatever the answer.
func TestPodMutatorReadsEachOwnerOnce(t *testing.T) {
	cache := memcache.New(test.Scheme())
	if err := cache.Add(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{annotations.Architectures: "auto"}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx", UID: "d1", Annotations: map[string]string{annotations.Strategy: good}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc", UID: "rs1", OwnerReferences: test.OwnedBy("apps/v1", "Deployment", "nginx", "d1")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "plain", UID: "d2", Annotations: map[string]string{annotations.Rebalance: "yes"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "plain-abc", UID: "rs2", OwnerReferences: test.OwnedBy("apps/v1", "Deployment", "plain", "d2")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "typo", UID: "d3", Annotations: map[string]string{annotations.Strategy: "a=b,weight=x"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "typo-abc", UID: "rs3", OwnerReferences: test.OwnedBy("apps/v1", "Deployment", "typo", "d3")}},
		&batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nightly", UID: "cj1", Annotations: map[string]string{annotations.Strategy: good}}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nightly-1", UID: "j1", OwnerReferences: test.OwnedBy("batch/v1", "CronJob", "nightly", "cj1")}},
	); err != nil {
		t.Fatal(err)
	}
	ownedBy := func(apiVersion, kind, name string, uid types.UID) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.OwnerReferences = test.OwnedBy(apiVersion, kind, name, uid) }
	}
	for _, tc := range []struct {
		name   string
		arch   string
		pod    *corev1.Pod
		result string
		want   map[string]int
	}{
		{name: "Deployment's pod, strategy on the Deployment", pod: rsPod(), result: ResultGated,
			want: map[string]int{"ReplicaSet": 1, "Deployment": 1}},
		{name: "invalid strategy", pod: rsPod(ownedBy("apps/v1", "ReplicaSet", "typo-abc", "rs3")), result: ResultInvalid,
			want: map[string]int{"ReplicaSet": 1, "Deployment": 1}},
		{name: "no strategy, namespace opted in to architectures", arch: options.ArchitecturesOptIn, pod: rsPod(ownedBy("apps/v1", "ReplicaSet", "plain-abc", "rs2")), result: ResultGated,
			want: map[string]int{"ReplicaSet": 1, "Deployment": 1, "Namespace": 1}},
		{name: "no strategy, architectures off", arch: options.ArchitecturesOff, pod: rsPod(ownedBy("apps/v1", "ReplicaSet", "plain-abc", "rs2")), result: ResultSkipped,
			want: map[string]int{"ReplicaSet": 1, "Deployment": 1}},
		{name: "CronJob's Job's pod", pod: rsPod(ownedBy("batch/v1", "Job", "nightly-1", "j1")), result: ResultGated,
			want: map[string]int{"Job": 1, "CronJob": 1}},
		{name: "ReplicaSet not cached", pod: rsPod(ownedBy("apps/v1", "ReplicaSet", "nginx-new", "rs9")), result: ResultGated,
			want: map[string]int{"ReplicaSet": 1}},
		{name: "bare pod, namespace opted in", arch: options.ArchitecturesOptIn, pod: rsPod(func(p *corev1.Pod) { p.OwnerReferences = nil }), result: ResultGated,
			want: map[string]int{"Namespace": 1}},
		{name: "bare pod annotated, namespace not read", arch: options.ArchitecturesOptIn, pod: rsPod(func(p *corev1.Pod) {
			p.OwnerReferences, p.Annotations = nil, map[string]string{annotations.Architectures: "auto"}
		}), result: ResultGated, want: map[string]int{}},
		{name: "DaemonSet's pod: nothing read", pod: rsPod(ownedBy("apps/v1", "DaemonSet", "agent", "ds1")), result: ResultSkipped, want: map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &countingReader{Reader: cache, gets: map[string]int{}}
			m := newMutator(t, true, nil)
			m.Reader, m.Architectures = r, tc.arch
			result, _ := m.Mutate(context.Background(), "web", tc.pod)
			if result != tc.result {
				t.Errorf("result %s, want %s", result, tc.result)
			}
			for kind, n := range r.gets {
				if n > 1 {
					t.Errorf("%s read %d times in one admission, want at most once", kind, n)
				}
			}
			if len(r.gets) != len(tc.want) {
				t.Errorf("reads %v, want %v", r.gets, tc.want)
			}
			for kind, n := range tc.want {
				if r.gets[kind] != n {
					t.Errorf("reads %v, want %v", r.gets, tc.want)
					break
				}
			}
			t.Logf("reads: %v", r.gets)
		})
	}
}
