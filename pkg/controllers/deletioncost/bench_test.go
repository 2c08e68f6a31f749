package deletioncost

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const benchStrategy = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// cachedRevision serves reads from an in-memory cache and applies the
// controller's merge patches to the cached pods, as the informer would show
// them back; it counts the patches.
type cachedRevision struct {
	client.Client
	*memcache.Reader
	pods    map[string]*corev1.Pod
	patches int
}

func (r *cachedRevision) Get(ctx context.Context, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	return r.Reader.Get(ctx, k, o, opts...)
}

func (r *cachedRevision) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	return r.Reader.List(ctx, l, opts...)
}

func (r *cachedRevision) Patch(_ context.Context, o client.Object, p client.Patch, _ ...client.PatchOption) error {
	data, err := p.Data(o)
	if err != nil {
		return err
	}
	var merge struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &merge); err != nil {
		return err
	}
	stored := r.pods[o.GetName()]
	for k, v := range merge.Metadata.Annotations {
		if v == nil {
			delete(stored.Annotations, k)
		} else {
			stored.Annotations[k] = *v
		}
	}
	stored.ResourceVersion = strconv.Itoa(r.patches + 2)
	r.patches++
	return nil
}

// newCachedRevision caches the Deployment, its ReplicaSet and n pods placed
// by the engine's sequence, with the costs the controller gives them.
func newCachedRevision(b *testing.B, n int) (*cachedRevision, *Controller, func(i int) *corev1.Pod) {
	b.Helper()
	deploy, rs := test.Workload(map[string]string{annotations.Strategy: benchStrategy})
	r := &cachedRevision{Reader: memcache.New(test.Scheme()), pods: map[string]*corev1.Pod{}}
	if err := r.Index(&corev1.Pod{}, IndexOwnerKey, func(o client.Object) []string { return []string{workload.OwnerKey(o.(*corev1.Pod))} }); err != nil {
		b.Fatal(err)
	}
	if err := r.Add(deploy, rs); err != nil {
		b.Fatal(err)
	}
	s, _ := compiled.Parse(benchStrategy)
	keys := s.Strategy.Keys()
	counts := make([]int64, len(keys))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// pod i is the i-th placed: its group is the engine's next.
	pod := func(i int) *corev1.Pod {
		g := s.Method.Next(counts, 1<<len(keys)-1)
		counts[g]++
		p := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("nginx-abc-%05d", i), UID: types.UID(fmt.Sprintf("pod-%d", i)),
			ResourceVersion: "1", CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
			Labels: map[string]string{workload.PodTemplateHashLabel: "abc"}}, Owner: rs, Phase: corev1.PodRunning, Group: keys[g], NodePool: "pool", Signer: testSigner})
		r.pods[p.Name] = p
		if err := r.Add(p); err != nil {
			b.Fatal(err)
		}
		return p
	}
	for i := range n {
		pod(i)
	}
	c := NewController(r, testSigner)
	if _, err := c.Reconcile(context.Background(), revisionRequest()); err != nil {
		b.Fatal(err)
	}
	r.patches = 0
	return r, c, pod
}

func revisionRequest() reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: "rs-uid"}}
}

// BenchmarkDeletionCostReconcile: one reconcile of a revision whose costs
// are up to date (nothing to patch), per pod of the revision.
func BenchmarkDeletionCostReconcile(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			_, c, _ := newCachedRevision(b, n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Reconcile(ctx, revisionRequest()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/pod")
		})
	}
}

// BenchmarkDeletionCostScaleUp: what the controller does for each pod
// placed in a revision of n pods: the pod's events (created gated, placed
// with the cost the placement controller writes, scheduled, running) and the
// reconciles they enqueue, run at once; per placed pod.
func BenchmarkDeletionCostScaleUp(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			r, c, pod := newCachedRevision(b, n)
			ctx := context.Background()
			h := c.EventHandler()
			q := &recordingQueue{}
			b.ReportAllocs()
			i := n
			for b.Loop() {
				placed := pod(i)
				i++
				placed.Annotations[Annotation] = strconv.Itoa(decision.SplitCost(i))
				gated := placed.DeepCopy()
				gated.Annotations = nil
				gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
				scheduled := placed.DeepCopy()
				scheduled.Spec.NodeName = "node"
				h.Create(ctx, event.CreateEvent{Object: gated}, q)
				h.Update(ctx, event.UpdateEvent{ObjectOld: gated, ObjectNew: placed}, q)
				h.Update(ctx, event.UpdateEvent{ObjectOld: placed, ObjectNew: scheduled}, q)
				h.Update(ctx, event.UpdateEvent{ObjectOld: scheduled, ObjectNew: scheduled.DeepCopy()}, q)
				for _, req := range q.take() {
					if _, err := c.Reconcile(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(r.patches)/float64(b.N), "patches/pod")
		})
	}
}
