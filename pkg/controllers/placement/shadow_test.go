package placement_test

import (
	"context"
	"maps"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
)

func ungated(p *corev1.Pod) { p.Spec.SchedulingGates = nil }

// shadowOf reads the pod's shadow decision, verified by signer.
func shadowOf(t *testing.T, signer *decision.Signer, pod *corev1.Pod) decision.Shadow {
	t.Helper()
	sh, ok := signer.ReadShadow(pod)
	if !ok {
		t.Fatalf("pod %s: no signed shadow decision in %v", pod.Name, pod.Annotations)
	}
	return sh
}

// onlyShadowAdded fails unless after is before with the apportion.dev/shadow
// annotation added (and, for a gated pod, the placement gate removed):
// no affinity, toleration, gate, deletion cost or decision annotation.
func onlyShadowAdded(t *testing.T, before, after *corev1.Pod) {
	t.Helper()
	want := before.DeepCopy()
	decision.RemoveGate(want)
	if !reflect.DeepEqual(want.Spec, after.Spec) {
		t.Errorf("pod %s: spec changed:\n%+v\nwant\n%+v", after.Name, after.Spec, want.Spec)
	}
	got := maps.Clone(after.Annotations)
	delete(got, annotations.Shadow)
	if len(got) != len(before.Annotations) || !maps.Equal(got, before.Annotations) {
		t.Errorf("pod %s: annotations %v, want %v and the shadow one", after.Name, after.Annotations, before.Annotations)
	}
}

// TestShadowBurstRecordsOnly: 20 ungated pods of a workload in shadow mode
// are decided exactly as placement would (the plan's sequence, so within
// quota at every n), and each gets the apportion.dev/shadow annotation
// alone: its spec stays as it was.
func TestShadowBurstRecordsOnly(t *testing.T) {
	signer := decision.RandomSigner()
	f := newFixture(t, map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow},
		nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	f.ctrl.WithSigner(signer)
	s, _ := strategy.Parse(seed004)
	const n = 20
	want, _ := plan.Compute(s, n)
	cs, _ := compiled.New(s)
	m := cs.Method
	before := testutil.ToFloat64(metrics.DecisionsTotal.WithLabelValues("karpenter.sh/capacity-type=spot", "spot", placement.ResultShadow))
	counts := make([]int64, len(s.Groups))
	for i := 0; i < n; i++ {
		created := f.gatedPod(t, i, ungated)
		pod := f.reconcile(t, created)
		onlyShadowAdded(t, created, pod)
		sh := shadowOf(t, signer, pod)
		wantGroup := want.Groups[want.Sequence[i]]
		if sh.Group != wantGroup {
			t.Fatalf("pod %d: shadow group %q, want %q (sequence %v)", i, sh.Group, wantGroup, want.Sequence)
		}
		wantPool := map[string]string{"karpenter.sh/capacity-type=on-demand": "od", "karpenter.sh/capacity-type=spot": "spot"}[wantGroup]
		if sh.NodePool != wantPool || sh.Record == nil || sh.Record.Reason != placement.RecordQuota || sh.Record.Revision != "abc" {
			t.Errorf("pod %d: shadow %+v", i, sh)
		}
		var seen int64
		for _, c := range sh.Record.Counts {
			seen += c
		}
		if seen != int64(i) {
			t.Errorf("pod %d: its decision saw %d pods, want %d", i, seen, i)
		}
		counts[want.Sequence[i]]++
		if !m.WithinQuota(counts, apportion.All) {
			t.Errorf("n=%d: shadow split %v out of quota", i+1, counts)
		}
	}
	if got := testutil.ToFloat64(metrics.DecisionsTotal.WithLabelValues("karpenter.sh/capacity-type=spot", "spot", placement.ResultShadow)) - before; got != float64(want.Counts["karpenter.sh/capacity-type=spot"]) {
		t.Errorf("%v shadow decisions for spot counted, want %d", got, want.Counts["karpenter.sh/capacity-type=spot"])
	}
}

// TestShadowConcurrentBurstStaysExact: 20 ungated pods decided by 8
// workers at once: each shadow decision saw the ones before it (totals
// 0..19 once each), and the split is the plan's.
func TestShadowConcurrentBurstStaysExact(t *testing.T) {
	signer := decision.RandomSigner()
	f := newFixture(t, map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow},
		nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	f.ctrl.WithSigner(signer)
	const n = 20
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = f.gatedPod(t, i, ungated)
	}
	list := f.reconcileConcurrently(t, pods, 8)
	seen := map[int64]bool{}
	groups := map[string]int{}
	for i := range list.Items {
		p := &list.Items[i]
		sh := shadowOf(t, signer, p)
		var total int64
		for _, c := range sh.Record.Counts {
			total += c
		}
		if seen[total] {
			t.Errorf("two shadow decisions saw %d pods", total)
		}
		seen[total] = true
		groups[sh.Group]++
		if p.Spec.Affinity != nil || len(p.Spec.Tolerations) > 0 || p.Annotations[annotations.Group] != "" || p.Annotations[corev1.PodDeletionCost] != "" {
			t.Errorf("pod %s changed: %+v %v", p.Name, p.Spec, p.Annotations)
		}
	}
	s, _ := strategy.Parse(seed004)
	want, _ := plan.Compute(s, n)
	for g, c := range want.Counts {
		if groups[g] != int(c) {
			t.Errorf("group %s: %d shadow pods, want %d (%v)", g, groups[g], c, groups)
		}
	}
}

// TestShadowDecisionsAreTalliedApart: a workload switched from required to
// shadow keeps its real decisions, and the shadow ones start their own
// split: neither counts the other.
func TestShadowDecisionsAreTalliedApart(t *testing.T) {
	signer := decision.RandomSigner()
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	f.ctrl.WithSigner(signer)
	f.tally.WithSigner(signer)
	for i := 0; i < 4; i++ {
		f.tally.Observe(f.reconcile(t, f.gatedPod(t, i)))
	}
	// The pod template now asks for shadow mode (same revision here, as a
	// workload-level annotation would).
	pod := f.reconcile(t, f.gatedPod(t, 10, ungated, func(p *corev1.Pod) {
		p.Annotations = map[string]string{annotations.Mode: annotations.ModeShadow}
	}))
	sh := shadowOf(t, signer, pod)
	if sh.Group != "karpenter.sh/capacity-type=on-demand" || sh.Record.Counts[0] != 0 || sh.Record.Counts[1] != 0 {
		t.Errorf("the first shadow decision: %+v %v, want on-demand from an empty split", sh, sh.Record)
	}
	f.tally.Observe(pod)
	placed := f.reconcile(t, f.gatedPod(t, 11))
	if rec := recordOf(t, placed); rec.Counts[0] != 2 || rec.Counts[1] != 2 {
		t.Errorf("the next real decision saw %v, want [2 2]: the shadow decision is not counted", rec.Counts)
	}
}

// TestShadowPodsAreStraysOnceRequired: a workload leaves shadow mode without
// a rollout (its annotation changes) while its 6 shadow pods run on an
// on-demand node, wherever their shadow decisions said. The real decisions
// count them there, as strays: at 10 pods seed 004 wants 4 on-demand, so
// the 4 new pods all go to spot (not on-demand, on-demand, spot, spot, as
// from an empty split).
func TestShadowPodsAreStraysOnceRequired(t *testing.T) {
	signer := decision.RandomSigner()
	node := test.Node("od-node", map[string]string{"karpenter.sh/capacity-type": "on-demand"})
	f := newFixture(t, map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow},
		node, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	f.ctrl.WithSigner(signer).WithNodes(f.client)
	f.tally.WithSigner(signer)
	ctx := context.Background()
	for i := range 6 {
		pod := f.reconcile(t, f.gatedPod(t, i, ungated))
		shadowOf(t, signer, pod)
		pod.Spec.NodeName = "od-node"
		if err := f.client.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		f.tally.Observe(pod)
	}
	deploy := &appsv1.Deployment{}
	if err := f.client.Get(ctx, client.ObjectKey{Namespace: "web", Name: "nginx"}, deploy); err != nil {
		t.Fatal(err)
	}
	delete(deploy.Annotations, annotations.Mode)
	if err := f.client.Update(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		pod := f.reconcile(t, f.gatedPod(t, 10+i))
		rec := recordOf(t, pod)
		if g := pod.Annotations[annotations.Group]; g != "karpenter.sh/capacity-type=spot" || !reflect.DeepEqual(rec.Strays, []int64{6, 0}) {
			t.Errorf("new pod %d: group %q, counts %v, strays %v; want spot, the 6 shadow pods counted as on-demand strays", i, g, rec.Counts, rec.Strays)
		}
	}
}

// TestCostCountsShadowPodsOnceRequired: once the workload has left shadow
// mode, a pod decided into a group whose nodes run shadow pods takes the
// cost of the group's next rank past them, as the deletion-cost controller
// ranks them (the shadow pods by their node): were they left out, the new
// pod would share a cost with one of them.
func TestCostCountsShadowPodsOnceRequired(t *testing.T) {
	signer := decision.RandomSigner()
	node := test.Node("spot-node", map[string]string{"karpenter.sh/capacity-type": "spot"})
	f := newFixture(t, map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow},
		node, nodePool("od", 10, "on-demand"), nodePool("spot", 10, "spot"))
	f.ctrl.WithSigner(signer).WithNodes(f.client)
	f.tally.WithSigner(signer)
	ctx := context.Background()
	for i := range 2 {
		pod := f.reconcile(t, f.gatedPod(t, i, ungated))
		shadowOf(t, signer, pod)
		pod.Spec.NodeName = "spot-node"
		if err := f.client.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		f.tally.Observe(pod)
	}
	deploy := &appsv1.Deployment{}
	if err := f.client.Get(ctx, client.ObjectKey{Namespace: "web", Name: "nginx"}, deploy); err != nil {
		t.Fatal(err)
	}
	delete(deploy.Annotations, annotations.Mode)
	if err := f.client.Update(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	s, err := compiled.Parse(seed004)
	if err != nil {
		t.Fatal(err)
	}
	// The engine's groups from the running split (the shadow pods on
	// spot), each pod the next of its group: on spot, past the shadow pods.
	seen, onSpot := []int64{0, 2}, 0
	for i := range 6 {
		g := s.Method.Next(seen, apportion.All)
		seen[g]++
		pod := f.reconcile(t, f.gatedPod(t, 10+i))
		f.tally.Observe(pod)
		cost, ok := decision.GroupCost(s.Method, g, seen[g])
		if !ok {
			t.Fatal("no position")
		}
		if got, c := pod.Annotations[annotations.Group], pod.Annotations[corev1.PodDeletionCost]; got != s.Strategy.Groups[g].Key() || c != strconv.Itoa(cost) {
			t.Errorf("new pod %d: group %q, cost %s; want %s, cost %d (its rank %d in the group)", i, got, c, s.Strategy.Groups[g].Key(), cost, seen[g])
		}
		if g == 1 {
			onSpot++
		}
	}
	if onSpot == 0 {
		t.Fatal("no new pod went to spot: nothing checked")
	}
}

// TestShadowIgnoresOtherUngatedPods: an ungated pod of a workload in
// required mode, or opted out, or without a strategy, is not written.
func TestShadowIgnoresOtherUngatedPods(t *testing.T) {
	for name, ann := range map[string]map[string]string{
		"required":         {annotations.Strategy: seed004},
		"preferred":        {annotations.Strategy: seed004, annotations.Mode: annotations.ModePreferred},
		"opted out":        {annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow, annotations.Skip: "true"},
		"no strategy":      {annotations.Mode: annotations.ModeShadow},
		"invalid strategy": {annotations.Strategy: "a=b,weight=x", annotations.Mode: annotations.ModeShadow},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, ann, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
			created := f.gatedPod(t, 0, ungated)
			pod := f.reconcile(t, created)
			if pod.ResourceVersion != created.ResourceVersion {
				t.Errorf("pod written: %v %+v", pod.Annotations, pod.Spec)
			}
		})
	}
}

// TestShadowByDefaultMode: with --default-mode=shadow a workload that names
// no mode is decided in shadow mode; one that asks for required is placed.
func TestShadowByDefaultMode(t *testing.T) {
	signer := decision.RandomSigner()
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	f.ctrl.WithSigner(signer).WithDefaultMode(annotations.ModeShadow)
	created := f.gatedPod(t, 0, ungated)
	pod := f.reconcile(t, created)
	onlyShadowAdded(t, created, pod)
	shadowOf(t, signer, pod)

	required := f.reconcile(t, f.gatedPod(t, 1, func(p *corev1.Pod) {
		p.Annotations = map[string]string{annotations.Mode: annotations.ModeRequired}
	}))
	if _, ok := signer.Read(required); !ok || decision.HasShadow(required) || len(required.Spec.SchedulingGates) != 0 {
		t.Errorf("a required pod under a shadow default: %v", required.Annotations)
	}
}

// TestShadowGatedPodIsReleasedWithItsShadow: a pod the webhook gated before
// it knew its workload is in shadow mode gets the shadow decision and loses
// the gate in one patch, nothing else.
func TestShadowGatedPodIsReleasedWithItsShadow(t *testing.T) {
	signer := decision.RandomSigner()
	f := newFixture(t, map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow}, nodePool("od", 10, "on-demand"))
	f.ctrl.WithSigner(signer)
	created := f.gatedPod(t, 0)
	pod := f.reconcile(t, created)
	if len(pod.Spec.SchedulingGates) != 0 {
		t.Fatalf("still gated")
	}
	onlyShadowAdded(t, created, pod)
	if sh := shadowOf(t, signer, pod); sh.NodePool != "od" {
		t.Errorf("shadow %+v", sh)
	}
}

// TestShadowPredicate: the creation of an ungated, undecided,
// controller-owned pod is passed (once); its updates are not, nor pods
// already decided or in shadow, terminating, or without a controller.
func TestShadowPredicate(t *testing.T) {
	f := newFixture(t, nil)
	p := placement.Predicate()
	candidate := f.gatedPod(t, 0, ungated)
	gated := f.gatedPod(t, 1)
	if !p.Create(event.CreateEvent{Object: candidate}) || p.Update(event.UpdateEvent{ObjectOld: candidate, ObjectNew: candidate}) {
		t.Errorf("ungated candidate: create must pass, update must not")
	}
	if !p.Create(event.CreateEvent{Object: gated}) || !p.Update(event.UpdateEvent{ObjectOld: gated, ObjectNew: gated}) {
		t.Errorf("gated pods pass every event")
	}
	for name, mutate := range map[string]func(*corev1.Pod){
		"shadowed": func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Shadow: "{}"} },
		"decided":  func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Group: "a=b"} },
		"signed":   func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Signature: "x"} },
		"bare":     func(p *corev1.Pod) { p.OwnerReferences = nil },
		"terminating": func(p *corev1.Pod) {
			ts := metav1.Now()
			p.DeletionTimestamp = &ts
		},
	} {
		pod := candidate.DeepCopy()
		mutate(pod)
		if p.Create(event.CreateEvent{Object: pod}) {
			t.Errorf("%s: passed", name)
		}
	}
}

// TestShadowFailsOpen: a pod in shadow mode that cannot be decided (no
// group can be served, or its owner never shows in the cache) is left as it
// is, without a write, and counted.
func TestShadowFailsOpen(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow}) // no NodePool
	before := testutil.ToFloat64(metrics.ReleasedTotal.WithLabelValues(placement.ShadowReason(placement.ReasonNoGroup)))
	created := f.gatedPod(t, 0, ungated)
	if pod := f.reconcile(t, created); pod.ResourceVersion != created.ResourceVersion {
		t.Errorf("pod written: %v %+v", pod.Annotations, pod.Spec)
	}
	if got := testutil.ToFloat64(metrics.ReleasedTotal.WithLabelValues(placement.ShadowReason(placement.ReasonNoGroup))) - before; got != 1 {
		t.Errorf("counted %v times, want once", got)
	}

	before = testutil.ToFloat64(metrics.ReleasedTotal.WithLabelValues(placement.ShadowReason(placement.ReasonError)))
	orphan := f.gatedPod(t, 1, ungated, func(p *corev1.Pod) {
		p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "nginx-gone", "rs-gone"
		p.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	})
	if pod := f.reconcile(t, orphan); pod.ResourceVersion != orphan.ResourceVersion {
		t.Errorf("pod written: %v", pod.Annotations)
	}
	if got := testutil.ToFloat64(metrics.ReleasedTotal.WithLabelValues(placement.ShadowReason(placement.ReasonError))) - before; got != 1 {
		t.Errorf("owner not cached: counted %v times, want once", got)
	}
}

// TestShadowArchitectureOnly: a pod placed by architecture alone, in shadow
// mode, gets the architectures its images run on in its shadow decision and
// nothing else; so does a Job's pod under a shadow default.
func TestShadowArchitectureOnly(t *testing.T) {
	signer := decision.RandomSigner()
	optedIn := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{annotations.Architectures: "auto"}}}
	f := newFixture(t, map[string]string{annotations.Mode: annotations.ModeShadow}, append(test.Objects(archPools()...), optedIn)...)
	f.ctrl.WithSigner(signer).WithImages(&fakeImages{res: result("example.com/arm64only:1", "arm64")}, time.Second)
	created := f.gatedPod(t, 0, ungated)
	pod := f.reconcile(t, created)
	onlyShadowAdded(t, created, pod)
	if sh := shadowOf(t, signer, pod); sh.Group != "" || len(sh.Architectures) != 1 || sh.Architectures[0] != "arm64" || sh.Record.Reason != placement.RecordArchitecture {
		t.Errorf("shadow %+v", sh)
	}

	f.ctrl.WithDefaultMode(annotations.ModeShadow)
	job := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "job-1", UID: "job-1", CreationTimestamp: metav1.NewTime(now),
		OwnerReferences: test.OwnedBy("batch/v1", "Job", "job", "job-uid")}})
	if err := f.client.Create(context.Background(), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "job", UID: "job-uid"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	got := f.reconcile(t, job)
	onlyShadowAdded(t, job, got)
	if sh := shadowOf(t, signer, got); len(sh.Architectures) != 1 || sh.Architectures[0] != "arm64" {
		t.Errorf("Job pod: shadow %+v", sh)
	}
}

// TestShadowLeavesOutOfScopePodsAlone: pods the webhook never holds stay
// untouched in shadow mode too, whatever their workload says: excluded or
// ignored namespaces, opted-out pods, Karpenter's and apportion's own.
func TestShadowLeavesOutOfScopePodsAlone(t *testing.T) {
	ann := map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow}
	for name, tc := range map[string]struct {
		excluded []string
		ns       *corev1.Namespace
		mutate   func(*corev1.Pod)
		archAll  bool // every pod placed by architecture, shadow by default
	}{
		"excluded namespace": {excluded: []string{"kube-system", "web"}},
		"ignored namespace":  {ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{annotations.Ignore: ""}}}},
		"opted-out pod":      {mutate: func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Skip: "true"} }},
		"karpenter's pod":    {mutate: func(p *corev1.Pod) { p.Labels["app.kubernetes.io/name"] = "karpenter" }},
		"mirror pod": {archAll: true, mutate: func(p *corev1.Pod) {
			p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name = "v1", "Node", "node-1"
		}},
		"DaemonSet pod": {archAll: true, mutate: func(p *corev1.Pod) {
			p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name = "DaemonSet", "agent"
		}},
	} {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if tc.ns != nil {
				objs = append(objs, tc.ns)
			}
			f := newFixture(t, ann, append(objs, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))...)
			f.ctrl.WithExcludedNamespaces(tc.excluded, true)
			if tc.archAll {
				f.ctrl.WithDefaultMode(annotations.ModeShadow).ArchitecturesForAll(true).
					WithImages(&fakeImages{res: result("example.com/multi:1", "amd64", "arm64")}, time.Second)
			}
			mutate := []func(*corev1.Pod){ungated}
			if tc.mutate != nil {
				mutate = append(mutate, tc.mutate)
			}
			created := f.gatedPod(t, 0, mutate...)
			if pod := f.reconcile(t, created); pod.ResourceVersion != created.ResourceVersion {
				t.Errorf("pod written: %v", pod.Annotations)
			}
		})
	}
	// The same pod in scope is decided: the cases above fail for their
	// reason alone.
	f := newFixture(t, ann, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, nodePool("od", 10, "on-demand"))
	f.ctrl.WithExcludedNamespaces([]string{"kube-system"}, true)
	if pod := f.reconcile(t, f.gatedPod(t, 0, ungated)); !decision.HasShadow(pod) {
		t.Errorf("in-scope pod not decided: %v", pod.Annotations)
	}
	// And so is a Job's pod under the same settings as the mirror and
	// DaemonSet pods above.
	f.ctrl.WithDefaultMode(annotations.ModeShadow).ArchitecturesForAll(true).
		WithImages(&fakeImages{res: result("example.com/multi:1", "amd64", "arm64")}, time.Second)
	if err := f.client.Create(context.Background(), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "job", UID: "job-uid"}}); err != nil {
		t.Fatal(err)
	}
	job := f.gatedPod(t, 1, ungated, func(p *corev1.Pod) {
		p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "batch/v1", "Job", "job", "job-uid"
	})
	if pod := f.reconcile(t, job); !decision.HasShadow(pod) {
		t.Errorf("in-scope Job pod not decided: %v", pod.Annotations)
	}
}

// TestShadowClusterPolicyRefusesSkip: in shadow mode, an opted-out pod of
// a workload a cluster policy with allowSkip: false places gets its shadow
// decision, as it would be placed in required mode; with allowSkip, or
// without a workload, the opt-out stands.
func TestShadowClusterPolicyRefusesSkip(t *testing.T) {
	for _, tc := range []struct {
		name      string
		allowSkip bool
		bare      bool
		want      bool
	}{
		{name: "allowSkip false", want: true},
		{name: "allowSkip true", allowSkip: true},
		{name: "bare pod", bare: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := &v1alpha1.ClusterPlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "platform", UID: "c1", CreationTimestamp: metav1.NewTime(now)},
				Spec: v1alpha1.ClusterPlacementPolicySpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
					Strategy: v1alpha1.Strategy{Text: seed004}, Mode: v1alpha1.Mode(annotations.ModeShadow), AllowSkip: ptr.To(tc.allowSkip)}}
			deploy, rs := test.Workload(nil)
			c := fake.NewClientBuilder().WithScheme(test.Scheme()).
				WithIndex(&v1alpha1.PlacementPolicy{}, policy.IndexTarget, policy.TargetIndex).
				WithObjects(cp, deploy, rs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"team": "web"}}},
					nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot")).Build()
			f := &fixture{client: c, recorder: events.NewFakeRecorder(100), clock: clocktesting.NewFakeClock(now), rs: rs, tally: placement.NewTally()}
			f.ctrl = placement.NewController(f.clock, c, f.recorder, &capacity.NodePoolCapacity{Reader: c}, f.tally, 30*time.Second).
				WithPolicies(policy.NewSource(c).WithClusterPolicies([]string{"apportion-system"})).WithSigner(decision.RandomSigner())
			if tc.bare {
				f.ctrl.WithDefaultMode(annotations.ModeShadow).ArchitecturesForAll(true).
					WithImages(&fakeImages{res: result("example.com/multi:1", "amd64", "arm64")}, time.Second)
			}
			pod := f.reconcile(t, f.gatedPod(t, 0, ungated, func(p *corev1.Pod) {
				p.Annotations = map[string]string{annotations.Skip: "true"}
				if tc.bare {
					p.OwnerReferences = nil
				}
			}))
			if got := decision.HasShadow(pod); got != tc.want {
				t.Errorf("shadow decision written: %v, want %v (%v)", got, tc.want, pod.Annotations)
			}
		})
	}
}
