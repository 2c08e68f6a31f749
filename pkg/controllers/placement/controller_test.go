package placement_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const seed004 = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

var now = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

type fixture struct {
	client   client.Client
	recorder *events.FakeRecorder
	ctrl     *placement.Controller
	clock    *clocktesting.FakeClock
	rs       *appsv1.ReplicaSet
	tally    *placement.Tally
	seen     int
}

func newFixture(t *testing.T, deployAnnotations map[string]string, objs ...client.Object) *fixture {
	t.Helper()
	deploy, rs := test.Workload(deployAnnotations)
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).
		WithObjects(append(objs, deploy, rs)...).Build()
	f := &fixture{client: c, recorder: events.NewFakeRecorder(100), clock: clocktesting.NewFakeClock(now), rs: rs, tally: placement.NewTally()}
	f.ctrl = placement.NewController(f.clock, c, f.recorder, &capacity.NodePoolCapacity{Reader: c}, f.tally, 30*time.Second)
	return f
}

func (f *fixture) gatedPod(t *testing.T, i int, mutate ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{
		Namespace: "web", Name: fmt.Sprintf("nginx-abc-%03d", i), UID: types.UID(fmt.Sprintf("pod-%d", i)),
		CreationTimestamp: metav1.NewTime(now),
		Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"},
	}, Owner: f.rs, Gated: true})
	for _, m := range mutate {
		m(pod)
	}
	if err := f.client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

func (f *fixture) reconcile(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var fresh corev1.Pod
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ctrl.Reconcile(ctx, &fresh); err != nil {
		t.Fatalf("reconcile %s: %v", pod.Name, err)
	}
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
		t.Fatal(err)
	}
	// The informer's view arrives after the patch, every other time a
	// little late: the tally counts the decision as pending meanwhile.
	if f.seen++; f.seen%2 == 0 {
		f.tally.Observe(&fresh)
	}
	return &fresh
}

func nodePool(name string, weight int32, capacityType string) *karpv1.NodePool {
	return test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: name}, Weight: weight,
		Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(karpv1.CapacityTypeLabelKey, capacityType)}})
}

func TestSeed004PlacesExactly(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.LegacyStrategy: seed004},
		nodePool("od", 10, "on-demand"), nodePool("od-low", 1, "on-demand"), nodePool("spot", 5, "spot"))
	s, _ := strategy.Parse(seed004)
	want, _ := plan.Compute(s, 10)
	for i := 0; i < 10; i++ {
		pod := f.reconcile(t, f.gatedPod(t, i))
		if len(pod.Spec.SchedulingGates) != 0 {
			t.Fatalf("pod %d still gated", i)
		}
		wantGroup := want.Groups[want.Sequence[i]]
		if got := pod.Annotations[annotations.Group]; got != wantGroup {
			t.Fatalf("pod %d: group %q, want %q (sequence %v)", i, got, wantGroup, want.Sequence)
		}
		wantPool := map[string]string{"karpenter.sh/capacity-type=on-demand": "od", "karpenter.sh/capacity-type=spot": "spot"}[wantGroup]
		if pod.Annotations[annotations.NodePool] != wantPool {
			t.Errorf("pod %d: nodepool %q, want %q", i, pod.Annotations[annotations.NodePool], wantPool)
		}
		terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 || terms[0].MatchExpressions[1].Values[0] != wantPool {
			t.Errorf("pod %d: terms %+v", i, terms)
		}
	}
}

func TestReleasesWithoutStrategyOrWhenInvalid(t *testing.T) {
	for name, ann := range map[string]map[string]string{
		"no strategy":      nil,
		"invalid strategy": {annotations.Strategy: "a=b,weight=x"},
		"opted out":        {annotations.Strategy: seed004, annotations.Skip: "true"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, ann, nodePool("od", 10, "on-demand"))
			pod := f.reconcile(t, f.gatedPod(t, 0))
			if len(pod.Spec.SchedulingGates) != 0 || pod.Annotations[annotations.Group] != "" || pod.Spec.Affinity != nil {
				t.Errorf("pod not released unchanged: gates %v, annotations %v, affinity %v", pod.Spec.SchedulingGates, pod.Annotations, pod.Spec.Affinity)
			}
		})
	}
}

func TestUnservedGroupIsLeftOutWithEvent(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("spot", 5, "spot"))
	for i := 0; i < 4; i++ {
		pod := f.reconcile(t, f.gatedPod(t, i))
		if pod.Annotations[annotations.Group] != "karpenter.sh/capacity-type=spot" {
			t.Fatalf("pod %d went to %q; on-demand has no NodePool", i, pod.Annotations[annotations.Group])
		}
	}
	// One Warning for the unserved group, not one per pod.
	if n := len(f.recorder.Events); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	if e := <-f.recorder.Events; !strings.Contains(e, "Warning GroupUnavailable group 1 (karpenter.sh/capacity-type=on-demand)") {
		t.Errorf("event %q", e)
	}
}

// TestTypoedLabelKeyNamedInEvent: a group left out because its label key
// is on no NodePool and no node says so first in its GroupUnavailable Event.
func TestTypoedLabelKeyNamedInEvent(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: "karpenter.sh/capacity-typ=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"},
		nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	if pod := f.reconcile(t, f.gatedPod(t, 0)); pod.Annotations[annotations.Group] != "karpenter.sh/capacity-type=spot" {
		t.Fatalf("pod went to %q, want spot", pod.Annotations[annotations.Group])
	}
	const want = `Warning GroupUnavailable group 1 (karpenter.sh/capacity-typ=on-demand) is left out of the split: label key "karpenter.sh/capacity-typ" is on no NodePool and no node (a typo?); no NodePool can serve the group: `
	if e := <-f.recorder.Events; !strings.HasPrefix(e, want) {
		t.Errorf("event %q, want it to start with %s", e, want)
	}
}

func TestUserConstraintsAreKept(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	pod := f.reconcile(t, f.gatedPod(t, 0, func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
			}}}}
	}))
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 2 || pod.Spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Fatalf("user constraints lost: %+v %v", terms, pod.Spec.NodeSelector)
	}
	for _, term := range terms {
		if len(term.MatchExpressions) != 3 || term.MatchExpressions[0].Key != "topology.kubernetes.io/zone" {
			t.Errorf("term %+v: want the user's expression ANDed with the decision", term)
		}
	}
}

// TestAPIErrorIsReturned: a patch the API refuses (other than a conflict) is
// counted and returned, for the workqueue to retry with backoff; the pod is
// decided once the API answers again.
func TestAPIErrorIsReturned(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	c := interceptor.NewClient(f.client.(client.WithWatch), test.FailPatches(2, apierrors.NewInternalError(fmt.Errorf("etcd is having a bad day"))))
	ctrl := placement.NewController(f.clock, c, f.recorder, &capacity.NodePoolCapacity{Reader: c}, f.tally, 30*time.Second)
	pod := f.gatedPod(t, 0)
	ctx := context.Background()
	errorsBefore := testutil.ToFloat64(metrics.APIErrorsTotal.WithLabelValues(decision.OperationDecide))
	for attempt := 1; attempt <= 3; attempt++ {
		var fresh corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
			t.Fatal(err)
		}
		res, err := ctrl.Reconcile(ctx, &fresh)
		failed := attempt <= 2
		if (err != nil) != failed || failed && !apierrors.IsInternalError(err) {
			t.Fatalf("attempt %d returned error %v; want the API error on the first two only", attempt, err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter != 0 {
			t.Errorf("attempt %d: RequeueAfter %s, want the workqueue's backoff", attempt, res.RequeueAfter)
		}
		if decided := fresh.Annotations[annotations.Group] != "" && len(fresh.Spec.SchedulingGates) == 0; decided == failed {
			t.Errorf("attempt %d: decided %v, gates %v", attempt, decided, fresh.Spec.SchedulingGates)
		}
	}
	if got := testutil.ToFloat64(metrics.APIErrorsTotal.WithLabelValues(decision.OperationDecide)) - errorsBefore; got != 2 {
		t.Errorf("api errors counted %v, want 2", got)
	}
}

// conflictOnce makes the first decision patch conflict, after running
// meanwhile (what another writer did to the pod in between).
func conflictOnce(meanwhile func(ctx context.Context, c client.WithWatch, obj client.Object)) interceptor.Funcs {
	conflicted := false
	return interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if !conflicted {
				conflicted = true
				if meanwhile != nil {
					meanwhile(ctx, c, obj)
				}
				return apierrors.NewConflict(corev1.Resource("pods"), obj.GetName(), fmt.Errorf("the object has been modified"))
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}
}

// releasedMeanwhile is conflictOnce's meanwhile for a pod the gate janitor
// released between the decision and its patch.
func releasedMeanwhile(t *testing.T) func(ctx context.Context, c client.WithWatch, obj client.Object) {
	return func(ctx context.Context, c client.WithWatch, obj client.Object) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &p); err != nil {
			t.Error(err)
			return
		}
		if err := decision.Release(ctx, c, &p); err != nil {
			t.Error(err)
		}
	}
}

// TestConflictSendsTheSameDecisionAgain: a decision whose patch conflicts
// (the cache was behind the pod) is sent again on the pod read from the API
// server, in the same reconcile: it stays counted once, and the next pod of
// the revision sees it.
func TestConflictSendsTheSameDecisionAgain(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	c := interceptor.NewClient(f.client.(client.WithWatch), conflictOnce(nil))
	f.ctrl = placement.NewController(f.clock, c, f.recorder, &capacity.NodePoolCapacity{Reader: c}, f.tally, 30*time.Second).WithAPIReader(f.client)
	first := f.reconcile(t, f.gatedPod(t, 0))
	if len(first.Spec.SchedulingGates) != 0 || first.Annotations[annotations.Group] != onDemandKey {
		t.Fatalf("after a conflict: gates %v, group %q; want the decision written in the same reconcile", first.Spec.SchedulingGates, first.Annotations[annotations.Group])
	}
	second := f.reconcile(t, f.gatedPod(t, 1))
	if got := recordOf(t, second).Counts; len(got) != 2 || got[0] != 1 || got[1] != 0 {
		t.Errorf("the next decision saw %v; want the first one counted once, [1 0]", got)
	}
}

// TestUnwrittenDecisionIsTakenBack: when the pod was released meanwhile (the
// gate janitor) the decision is not written, and the next pod of the
// revision does not count it.
func TestUnwrittenDecisionIsTakenBack(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	c := interceptor.NewClient(f.client.(client.WithWatch), conflictOnce(releasedMeanwhile(t)))
	f.ctrl = placement.NewController(f.clock, c, f.recorder, &capacity.NodePoolCapacity{Reader: c}, f.tally, 30*time.Second).WithAPIReader(f.client)
	notWritten := metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(onDemandKey), metrics.NodePools.Value("od"), placement.ResultNotWritten)
	before := testutil.ToFloat64(notWritten)
	released := f.reconcile(t, f.gatedPod(t, 0))
	if released.Annotations[annotations.Group] != "" {
		t.Fatalf("a released pod got decision %q", released.Annotations[annotations.Group])
	}
	if got := testutil.ToFloat64(notWritten) - before; got != 1 {
		t.Errorf("decisions not written counted %v, want 1", got)
	}
	if f.tally.Decided(released.UID) {
		t.Error("the decision that was not written is still counted")
	}
	next := f.reconcile(t, f.gatedPod(t, 1))
	if got := recordOf(t, next).Counts; len(got) != 2 || got[0] != 0 || got[1] != 0 {
		t.Errorf("the next decision saw %v; want [0 0]", got)
	}
}

const onDemandKey = "karpenter.sh/capacity-type=on-demand"

func recordOf(t *testing.T, pod *corev1.Pod) decision.Record {
	t.Helper()
	var r decision.Record
	if err := json.Unmarshal([]byte(pod.Annotations[annotations.Decision]), &r); err != nil {
		t.Fatalf("pod %s: decision record %q: %v", pod.Name, pod.Annotations[annotations.Decision], err)
	}
	return r
}

// TestConcurrentDecisionsStayExact: 16 workers decide 60 pods of one
// revision at once, their patches overlapping; every decision saw the ones
// before it exactly (the records' totals are 0..59, once each) and the split
// is the plan's.
func TestConcurrentDecisionsStayExact(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	const n = 60
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = f.gatedPod(t, i)
	}
	list := f.reconcileConcurrently(t, pods, 16)
	seen := map[int64]bool{}
	groups := map[string]int{}
	for i := range list.Items {
		var total int64
		for _, c := range recordOf(t, &list.Items[i]).Counts {
			total += c
		}
		if seen[total] {
			t.Errorf("two decisions saw %d pods", total)
		}
		seen[total] = true
		groups[list.Items[i].Annotations[annotations.Group]]++
	}
	s, _ := strategy.Parse(seed004)
	want, _ := plan.Compute(s, n)
	for g, c := range want.Counts {
		if groups[g] != int(c) {
			t.Errorf("group %s: %d pods, want %d (%v)", g, groups[g], c, groups)
		}
	}
}

// reconcileConcurrently reconciles pods with workers goroutines, in order
// from a shared queue, as the controller's workers do, and returns every pod
// of the fixture afterwards.
func (f *fixture) reconcileConcurrently(t *testing.T, pods []*corev1.Pod, workers int) corev1.PodList {
	t.Helper()
	queue := make(chan *corev1.Pod, len(pods))
	for _, p := range pods {
		queue <- p
	}
	close(queue)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for pod := range queue {
				if _, err := f.ctrl.Reconcile(ctx, pod); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	var list corev1.PodList
	if err := f.client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	return list
}

// TestCapsHoldInPlacement: a capped group gets no pod past its cap, what it
// cannot take goes to the other group, and once every group is at its cap
// the next pods are released without a group, counted by reason.
func TestCapsHoldInPlacement(t *testing.T) {
	const od, spot = "karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"
	for _, tc := range []struct {
		name, strategy string
		want           []string // each pod's group, "" for none
	}{{
		name:     "at most 3 on on-demand, the rest on spot",
		strategy: od + ",weight=1,max=3:" + spot + ",weight=1",
		want:     []string{od, spot, od, spot, od, spot, spot, spot, spot, spot},
	}, {
		name:     "every group capped",
		strategy: od + ",weight=1,max=2:" + spot + ",weight=1,max=3",
		want:     []string{od, spot, od, spot, spot, "", ""},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{annotations.Strategy: tc.strategy}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
			before := testutil.ToFloat64(metrics.ReleasedTotal.WithLabelValues(placement.ReasonBeyondCaps))
			beyond := 0
			for i, want := range tc.want {
				pod := f.reconcile(t, f.gatedPod(t, i))
				if len(pod.Spec.SchedulingGates) != 0 {
					t.Fatalf("pod %d still gated", i)
				}
				if got := pod.Annotations[annotations.Group]; got != want {
					t.Fatalf("pod %d: group %q, want %q", i, got, want)
				}
				if want == "" {
					beyond++
					if pod.Spec.Affinity != nil {
						t.Errorf("pod %d beyond caps has an affinity: %+v", i, pod.Spec.Affinity)
					}
				}
			}
			if got := testutil.ToFloat64(metrics.ReleasedTotal.WithLabelValues(placement.ReasonBeyondCaps)) - before; got != float64(beyond) {
				t.Errorf("released beyond caps %v times, want %d", got, beyond)
			}
		})
	}
}

// TestJobSplitAmongLivePods: a Job's pods are split among its live pods:
// when pods of one group complete, the next ones go there, so the running
// pods stay within quota; and none gets a deletion cost.
func TestJobSplitAmongLivePods(t *testing.T) {
	const half = "g=a,weight=1:g=b,weight=1"
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "etl", UID: "job1", Annotations: map[string]string{annotations.Strategy: half}}}
	pool := func(name string) *karpv1.NodePool {
		return test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: name}, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement("g", name)}})
	}
	f := newFixture(t, nil, job, pool("a"), pool("b"))
	ctx := context.Background()
	live := map[string]*corev1.Pod{}
	place := func(i int) {
		t.Helper()
		pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: fmt.Sprintf("etl-%d", i), UID: types.UID(fmt.Sprintf("job-pod-%d", i)),
			CreationTimestamp: metav1.NewTime(now), OwnerReferences: test.OwnedBy("batch/v1", "Job", "etl", "job1")}, Gated: true})
		if err := f.client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod = f.reconcile(t, pod)
		if _, ok := pod.Annotations["controller.kubernetes.io/pod-deletion-cost"]; ok || pod.Annotations[annotations.Group] == "" {
			t.Fatalf("pod %d: annotations %v, want a group and no deletion cost", i, pod.Annotations)
		}
		f.tally.Observe(pod)
		live[pod.Name] = pod
	}
	split := func() map[string]int {
		n := map[string]int{}
		for _, p := range live {
			n[p.Annotations[annotations.Group]]++
		}
		return n
	}
	for i := range 4 {
		place(i)
	}
	// Both pods of g=a complete.
	for name, p := range live {
		if p.Annotations[annotations.Group] == "g=a" {
			done := p.DeepCopy()
			done.Status.Phase = corev1.PodSucceeded
			f.tally.Observe(done)
			delete(live, name)
		}
	}
	place(4)
	place(5)
	if got := split(); got["g=a"] != 2 || got["g=b"] != 2 {
		t.Errorf("live split %v, want 2 and 2", got)
	}
}
