package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/controllers/deletioncost"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const seed004 = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// TestWritesPerPlacedPod: a scale-up run through the placement controller
// and the deletion-cost controller, the informer's view of every write fed
// back to both (the tally, the event handlers), the deletion-cost queue
// drained every 20 pods (a debounce window), costs at most 1.5 API writes
// per placed pod (one: the placement patch carries the cost), a fallback pod
// one, 1.1 after an outage, and leaves every pod with the cost the deletion-cost controller
// computes from scratch.
func TestWritesPerPlacedPod(t *testing.T) {
	for _, tc := range []struct {
		name      string
		workloads int
		pods      int
		outage    int // the first pods placed while spot is out of capacity
	}{
		{"one Deployment", 1, 200, 0},
		{"two Deployments interleaved", 2, 200, 0},
		{"spot out of capacity for the first 50", 1, 200, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newWriteHarness(t, tc.workloads)
			if tc.outage > 0 {
				h.tracker.Mark(capacity.PoolKey("spot"), "limits")
			}
			for i := range tc.pods {
				if i == tc.outage && i > 0 {
					h.drain(t)
					// The fallback pods took their costs with their decisions.
					if h.writes != tc.outage {
						t.Errorf("%d writes for the %d pods placed by fallback, want one each", h.writes, tc.outage)
					}
					h.tracker.Lift(capacity.PoolKey("spot"))
				}
				h.place(t, h.rs[i%tc.workloads], i)
				if i%20 == 19 {
					h.drain(t)
				}
			}
			h.drain(t)
			perPod := float64(h.writes) / float64(tc.pods)
			t.Logf("%d writes for %d placed pods: %.3f per pod", h.writes, tc.pods, perPod)
			if want := 1.5; perPod > want && tc.outage == 0 {
				t.Errorf("%.3f API writes per placed pod, want at most %.1f", perPod, want)
			}
			// After an outage the fallback pods count in on-demand, and the
			// pods placed since take the next ranks of their groups.
			if want := 1.1; perPod > want && tc.outage > 0 {
				t.Errorf("%.3f API writes per placed pod after an outage, want at most %.1f", perPod, want)
			}
			for _, rs := range h.rs {
				h.checkCosts(t, rs)
			}
		})
	}
}

// TestWritesAfterShadowMode: a workload that ran 13 pods in shadow mode,
// all on spot nodes, left it and grew to 20 pods through the placement
// controller and the deletion-cost controller. Each new pod is one write
// (its cost in its placement patch), each shadow pod one (its cost, by its
// node's group), and nothing else is rewritten: the new pods' costs already
// counted the shadow pods of their group. The costs then take the split down
// to 1 as close to quota as the pods allow.
func TestWritesAfterShadowMode(t *testing.T) {
	h := newWriteHarness(t, 1)
	ctx := context.Background()
	for _, n := range []*corev1.Node{
		test.Node("od-1", map[string]string{karpv1.CapacityTypeLabelKey: "on-demand"}),
		test.Node("spot-1", map[string]string{karpv1.CapacityTypeLabelKey: "spot"}),
	} {
		if err := h.raw.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	h.placer.WithNodes(h.raw)
	rs := h.rs[0]
	const shadows, grown = 13, 20
	for i := range shadows {
		p := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("%s-%03d", rs.Name, i), UID: types.UID(fmt.Sprintf("%s-%d", rs.Name, i)),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 22, 0, 0, i, 0, time.UTC)),
			Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"}}, Owner: rs, NodeName: "spot-1"})
		decision.WriteShadow(p, decision.Shadow{Group: "karpenter.sh/capacity-type=on-demand", Signature: h.signer.SignShadow(p.UID, "karpenter.sh/capacity-type=on-demand", "")})
		p.Status.Phase = corev1.PodRunning
		if err := h.raw.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		h.observe(nil, p)
	}
	h.drain(t) // a revision without a decided pod: nothing to do
	if h.writes != 0 {
		t.Fatalf("%d writes before any pod was decided", h.writes)
	}
	for i := shadows; i < grown; i++ {
		h.place(t, rs, i)
		if i%3 == 0 {
			h.drain(t)
		}
	}
	h.drain(t)
	if want := (grown - shadows) + shadows; h.writes != want {
		t.Errorf("%d writes, want %d: one per placed pod and one per shadow pod", h.writes, want)
	}
	s, _ := compiled.Parse(seed004)
	pods := h.revisionPods(t, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(rs.UID)}})
	group := func(p *corev1.Pod) int {
		if p.Spec.NodeName == "spot-1" {
			return 1
		}
		return s.Index[p.Annotations[annotations.Group]]
	}
	cost := func(p *corev1.Pod) int {
		n, err := strconv.Atoi(p.Annotations[deletioncost.Annotation])
		if err != nil {
			t.Fatalf("%s: cost %q", p.Name, p.Annotations[deletioncost.Annotation])
		}
		return n
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return cost(a) - cost(b) })
	counts := make([]int64, 2)
	for _, p := range pods {
		counts[group(p)]++
	}
	from := slices.Clone(counts)
	for k, p := range pods[:len(pods)-1] {
		if k > 0 && cost(p) == cost(pods[k-1]) {
			t.Errorf("%s and %s share cost %d", pods[k-1].Name, p.Name, cost(p))
		}
		counts[group(p)]--
		n := counts[0] + counts[1]
		best := int64(-1)
		for a := max(0, n-from[1]); a <= min(n, from[0]); a++ {
			if off := s.Method.OffQuota([]int64{a, n - a}, apportion.All); best < 0 || off < best {
				best = off
			}
		}
		if off := s.Method.OffQuota(counts, apportion.All); off > best {
			t.Errorf("after removing %s: %v is %d off quota, %d possible from %v", p.Name, counts, off, best, from)
		}
	}
}

type writeHarness struct {
	kube    client.Client // counts writes
	raw     client.Client
	tally   *placement.Tally
	placer  *placement.Controller
	costs   *deletioncost.Controller
	tracker *capacity.Tracker
	signer  *decision.Signer
	queue   *requestSet
	rs      []*appsv1.ReplicaSet
	writes  int
}

func newWriteHarness(t *testing.T, workloads int) *writeHarness {
	t.Helper()
	signer := decision.RandomSigner()
	objs := []client.Object{
		test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: "od"}, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(karpv1.CapacityTypeLabelKey, "on-demand")}}),
		test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: "spot"}, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(karpv1.CapacityTypeLabelKey, "spot")}}),
	}
	h := &writeHarness{queue: &requestSet{}, signer: signer}
	for w := range workloads {
		name := fmt.Sprintf("app-%d", w)
		deploy := test.Deployment(metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID("d-" + name), Annotations: map[string]string{annotations.Strategy: seed004}})
		rs := test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: name + "-abc", UID: types.UID("rs-" + name)}, deploy)
		h.rs = append(h.rs, rs)
		objs = append(objs, deploy, rs)
	}
	h.raw = fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, deletioncost.IndexOwnerKey, func(o client.Object) []string { return []string{workload.OwnerKey(o.(*corev1.Pod))} }).Build()
	count := func() { h.writes++ }
	h.kube = interceptor.NewClient(h.raw.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, o, p, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, o, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, o, opts...)
		},
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC))
	h.tracker = capacity.NewTracker(clk, time.Hour, time.Hour)
	h.tally = placement.NewTally().WithSigner(signer)
	h.placer = placement.NewController(clk, h.kube, events.NewFakeRecorder(1000), &capacity.NodePoolCapacity{Reader: h.kube, Tracker: h.tracker}, h.tally, time.Minute).WithSigner(signer)
	h.costs = deletioncost.NewController(h.kube, signer)
	return h
}

// observe shows a pod's new state to both controllers, as the informer
// would.
func (h *writeHarness) observe(old, pod *corev1.Pod) {
	h.tally.Observe(pod)
	if old == nil {
		h.costs.EventHandler().Create(context.Background(), event.CreateEvent{Object: pod}, h.queue)
		return
	}
	h.costs.EventHandler().Update(context.Background(), event.UpdateEvent{ObjectOld: old, ObjectNew: pod}, h.queue)
}

// place creates pod i of rs gated, has the placement controller decide it,
// and shows the result, then the pod running, to both controllers.
func (h *writeHarness) place(t *testing.T, rs *appsv1.ReplicaSet, i int) {
	t.Helper()
	ctx := context.Background()
	gated := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("%s-%03d", rs.Name, i), UID: types.UID(fmt.Sprintf("%s-%d", rs.Name, i)),
		CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 22, 0, 0, i, 0, time.UTC)),
		Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"}}, Owner: rs, Gated: true})
	if err := h.raw.Create(ctx, gated); err != nil { // the ReplicaSet controller's write, not counted
		t.Fatal(err)
	}
	h.observe(nil, gated)
	if _, err := h.placer.Reconcile(ctx, gated.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	placed := h.get(t, gated)
	if decision.HasGate(placed) {
		t.Fatalf("%s still gated", placed.Name)
	}
	h.observe(gated, placed)
	running := placed.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	h.observe(placed, running)
}

// drain runs the deletion-cost reconciles queued, showing their patches back.
func (h *writeHarness) drain(t *testing.T) {
	t.Helper()
	for len(h.queue.requests) > 0 {
		reqs := h.queue.requests
		h.queue.requests = nil
		for _, req := range reqs {
			before := h.revisionPods(t, req)
			if _, err := h.costs.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			for _, old := range before {
				if pod := h.get(t, old); pod.Annotations[deletioncost.Annotation] != old.Annotations[deletioncost.Annotation] {
					h.observe(old, pod)
				}
			}
		}
	}
}

func (h *writeHarness) revisionPods(t *testing.T, req reconcile.Request) []*corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := h.raw.List(context.Background(), &list, client.InNamespace(req.Namespace), client.MatchingFields{deletioncost.IndexOwnerKey: req.Name}); err != nil {
		t.Fatal(err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods
}

func (h *writeHarness) get(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	var fresh corev1.Pod
	if err := h.raw.Get(context.Background(), client.ObjectKeyFromObject(pod), &fresh); err != nil {
		t.Fatal(err)
	}
	return &fresh
}

// checkCosts: every pod of the revision carries the cost Costs computes from
// its pods as they are, and the same as from the pods without any cost (the
// newest first: the pods were placed in the order they were created).
func (h *writeHarness) checkCosts(t *testing.T, rs *appsv1.ReplicaSet) {
	t.Helper()
	s, _ := strategy.Parse(seed004)
	pods := h.revisionPods(t, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(rs.UID)}})
	want, err := deletioncost.Costs(s, pods)
	if err != nil {
		t.Fatal(err)
	}
	blank := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		blank[i] = p.DeepCopy()
		delete(blank[i].Annotations, deletioncost.Annotation)
	}
	scratch, _ := deletioncost.Costs(s, blank)
	for _, p := range pods {
		if got := p.Annotations[deletioncost.Annotation]; got != strconv.Itoa(want[p.UID]) || want[p.UID] != scratch[p.UID] {
			t.Errorf("%s: cost %q, want %d (from scratch %d)", p.Name, got, want[p.UID], scratch[p.UID])
		}
	}
}

// requestSet is the deletion-cost controller's queue: requests waiting are
// not added twice.
type requestSet struct {
	deletioncost.Queue // nil: only AddAfter is called
	requests           []reconcile.Request
}

func (q *requestSet) AddAfter(r reconcile.Request, _ time.Duration) {
	for _, have := range q.requests {
		if have == r {
			return
		}
	}
	q.requests = append(q.requests, r)
}
