package drift

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/catalog"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
)

const (
	ct       = "karpenter.sh/capacity-type"
	seed004  = ct + "=on-demand,base=2,weight=1:" + ct + "=spot,weight=3"
	after    = 10 * time.Minute
	odGroup  = ct + "=on-demand"
	spotNote = "no NodePool can serve the group"
)

var epoch = time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)

// pools serves on-demand from "od" and leaves spot out while noSpot. It
// notes the pods it is asked about.
type pools struct {
	noSpot bool
	asked  []*corev1.Pod
}

func (p *pools) Choose(_ context.Context, s *strategy.Strategy, pod *corev1.Pod, _ []string, _ string) ([]catalog.Choice, []error, error) {
	p.asked = append(p.asked, pod)
	choices := make([]catalog.Choice, len(s.Groups))
	errs := make([]error, len(s.Groups))
	for i, g := range s.Groups {
		if v := g.Selector()[ct]; v == "spot" && p.noSpot {
			errs[i] = errors.New(spotNote)
		} else {
			choices[i].Pool = &catalog.Pool{Name: v}
		}
	}
	return choices, errs, nil
}

// fixture is a drift controller over a fake cached client with the nodes
// od-1 (on-demand) and spot-1 (spot).
type fixture struct {
	t        *testing.T
	client   client.Client
	clock    *clocktesting.FakeClock
	rec      *events.FakeRecorder
	pools    *pools
	exported *metrics.Capped
	ctrl     *Controller
}

func newFixture(t *testing.T, limit int, objs ...client.Object) *fixture {
	t.Helper()
	metrics.WorkloadDrift.Reset()
	metrics.WorkloadPods.Reset()
	metrics.WorkloadsDrifting.Set(0)
	objs = append(objs, test.Node("od-1", map[string]string{ct: "on-demand"}), test.Node("spot-1", map[string]string{ct: "spot"}))
	f := &fixture{t: t, clock: clocktesting.NewFakeClock(epoch), rec: events.NewFakeRecorder(100), pools: &pools{}, exported: metrics.NewCapped(limit)}
	f.client = fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, podcache.IndexController, podcache.ControllerIndex).Build()
	f.ctrl = NewController(f.clock, f.client, apevents.NewRecorder(f.rec), f.pools, Options{After: after, Exported: f.exported})
	return f
}

// deployment is web/name with the strategy and 10 replicas, and its
// ReplicaSets (one per revision).
func deployment(name string, revisions ...string) []client.Object {
	d := test.Deployment(metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name),
		Annotations: map[string]string{annotations.Strategy: seed004}})
	d.Spec.Replicas = ptr.To[int32](10)
	objs := []client.Object{d}
	for _, r := range revisions {
		objs = append(objs, test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: name + "-" + r, UID: types.UID(name + "-" + r)}, d))
	}
	return objs
}

// pods are n Running pods of the ReplicaSet name-revision on node, with the
// decision's node affinity (the group's label and the NodePool).
func pods(name, revision, node string, from, n int) []client.Object {
	rs := test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: name + "-" + revision, UID: types.UID(name + "-" + revision)}, nil)
	value := strings.TrimSuffix(node, "-1")
	if value == "od" {
		value = "on-demand"
	}
	var out []client.Object
	for i := from; i < from+n; i++ {
		out = append(out, test.Pod(test.PodOptions{
			ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("%s-%s-%d", name, revision, i), UID: types.UID(fmt.Sprintf("%s-%s-%d", name, revision, i))},
			Owner:      rs, NodeName: node, Phase: corev1.PodRunning,
			Requirements: []corev1.NodeSelectorRequirement{
				{Key: ct, Operator: corev1.NodeSelectorOpIn, Values: []string{value}},
				{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{value}},
				{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
			},
		}))
	}
	return out
}

func (f *fixture) sweep(d time.Duration) {
	f.t.Helper()
	f.clock.Step(d)
	if err := f.ctrl.Sweep(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

// events drains the recorded Events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func driftGauge(name string) float64 {
	return testutil.ToFloat64(metrics.WorkloadDrift.WithLabelValues("web", "Deployment", name))
}

// podsGauge is apportion_workload_pods of web/nginx.
func podsGauge(group, state string) float64 {
	return testutil.ToFloat64(metrics.WorkloadPods.WithLabelValues("web", "Deployment", "nginx", group, state))
}

func TestWithinQuota(t *testing.T) {
	objs := append(deployment("nginx", "a"), pods("nginx", "a", "od-1", 0, 4)...)
	f := newFixture(t, 10, append(objs, pods("nginx", "a", "spot-1", 4, 6)...)...)
	for range 3 {
		f.sweep(after)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("Events %q, want none", ev)
	}
	if g := driftGauge("nginx"); g != 0 {
		t.Errorf("apportion_workload_drift %v, want 0", g)
	}
	for _, c := range []struct {
		group, state string
		want         float64
	}{{odGroup, metrics.StateDesired, 4}, {odGroup, metrics.StateRunning, 4}, {ct + "=spot", metrics.StateDesired, 6}, {ct + "=spot", metrics.StateRunning, 6}} {
		if got := podsGauge(c.group, c.state); got != c.want {
			t.Errorf("apportion_workload_pods{group=%q,state=%q} %v, want %v", c.group, c.state, got, c.want)
		}
	}
}

// TestDriftOnLeftOutGroup: 10 pods on on-demand, spot left out: no Event
// before --drift-after, one SplitDrift with the numbers after it (and no
// second within the hour), then SplitRestored once back within quota.
func TestDriftOnLeftOutGroup(t *testing.T) {
	f := newFixture(t, 10, append(deployment("nginx", "a"), pods("nginx", "a", "od-1", 0, 10)...)...)
	f.pools.noSpot = true
	f.sweep(0)
	f.sweep(5 * time.Minute)
	f.sweep(5 * time.Minute)
	if ev := f.events(); len(ev) != 0 {
		t.Fatalf("Events before the threshold: %q", ev)
	}
	if g := driftGauge("nginx"); g != 0 {
		t.Errorf("apportion_workload_drift %v before the threshold, want 0", g)
	}
	f.sweep(2 * time.Minute)
	ev := f.events()
	want := "Warning SplitDrift off its strategy for 12m0s: group 1 (" + odGroup + ") 10 running, quota 10, 10 wanted at 10 replicas; group 2 (" +
		ct + "=spot) 0 running, left out: " + spotNote
	if len(ev) != 1 || ev[0] != want {
		t.Fatalf("Events %q, want [%q]", ev, want)
	}
	if g, n := driftGauge("nginx"), testutil.ToFloat64(metrics.WorkloadsDrifting); g != 1 || n != 1 {
		t.Errorf("apportion_workload_drift %v, apportion_workloads_drifting %v; want 1 and 1", g, n)
	}
	if d, r := podsGauge(odGroup, metrics.StateDesired), podsGauge(odGroup, metrics.StateRunning); d != 10 || r != 10 {
		t.Errorf("on-demand desired %v running %v, want 10 and 10", d, r)
	}
	f.sweep(sweepPeriod)
	if again := f.events(); len(again) != 0 {
		t.Errorf("a second SplitDrift within the hour: %q", again)
	}
	// The pools asked about were stripped of the decision's pins.
	for _, p := range f.pools.asked {
		for _, term := range p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, r := range term.MatchExpressions {
				if r.Key == ct || r.Key == karpv1.NodePoolLabelKey {
					t.Fatalf("Capacity asked with the decision's requirement %+v", r)
				}
			}
			if len(term.MatchExpressions) != 1 {
				t.Fatalf("Capacity asked without the architecture requirement: %+v", term)
			}
		}
	}

	// Spot is served again and the pods moved: back within quota.
	f.pools.noSpot = false
	for _, o := range pods("nginx", "a", "od-1", 4, 6) {
		if err := f.client.Delete(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range pods("nginx", "a", "spot-1", 4, 6) {
		if err := f.client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	f.sweep(sweepPeriod)
	ev = f.events()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal SplitRestored back within its strategy after 13m0s") {
		t.Errorf("Events %q, want one SplitRestored", ev)
	}
	if g, n := driftGauge("nginx"), testutil.ToFloat64(metrics.WorkloadsDrifting); g != 0 || n != 0 {
		t.Errorf("apportion_workload_drift %v, apportion_workloads_drifting %v; want 0 and 0", g, n)
	}
}

// TestDriftAfterZeroIsOff: --drift-after=0 records no Event and keeps the
// drift gauge at 0.
func TestDriftAfterZeroIsOff(t *testing.T) {
	f := newFixture(t, 10, append(deployment("nginx", "a"), pods("nginx", "a", "od-1", 0, 10)...)...)
	f.ctrl.opts.After = 0
	f.pools.noSpot = true
	for range 3 {
		f.sweep(time.Hour)
	}
	if ev := f.events(); len(ev) != 0 || driftGauge("nginx") != 0 {
		t.Errorf("Events %q, gauge %v; want none and 0", ev, driftGauge("nginx"))
	}
}

// TestRolloutIsNotDrift: pods of two revisions (a rolling update) are no
// evidence, however long it lasts; nor are fewer pods than replicas.
func TestRolloutIsNotDrift(t *testing.T) {
	objs := append(deployment("nginx", "a", "b"), pods("nginx", "a", "od-1", 0, 5)...)
	objs = append(objs, pods("nginx", "b", "od-1", 5, 5)...)
	objs = append(objs, deployment("short", "a")...)
	objs = append(objs, pods("short", "a", "od-1", 0, 9)...)
	f := newFixture(t, 10, objs...)
	f.pools.noSpot = true
	for range 4 {
		f.sweep(after)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("Events %q during a rollout, want none", ev)
	}
	if g, s := driftGauge("nginx"), driftGauge("short"); g != 0 || s != 0 {
		t.Errorf("apportion_workload_drift %v and %v, want 0", g, s)
	}
	// The dashboard still sees the pods.
	if r := podsGauge(odGroup, metrics.StateRunning); r != 10 {
		t.Errorf("running on-demand %v, want 10", r)
	}
}

// TestGoneWorkloadSeriesDeleted: a workload whose pods are gone has no
// series left, and its place under the cap is free.
func TestGoneWorkloadSeriesDeleted(t *testing.T) {
	objs := append(deployment("nginx", "a"), pods("nginx", "a", "od-1", 0, 10)...)
	f := newFixture(t, 10, objs...)
	f.pools.noSpot = true
	f.sweep(0)
	f.sweep(after + time.Minute)
	if n := testutil.CollectAndCount(metrics.WorkloadPods); n == 0 {
		t.Fatal("no apportion_workload_pods series before the workload is gone")
	}
	f.events()
	for _, o := range objs {
		if err := f.client.Delete(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	f.sweep(sweepPeriod)
	if d, p := testutil.CollectAndCount(metrics.WorkloadDrift), testutil.CollectAndCount(metrics.WorkloadPods); d != 0 || p != 0 {
		t.Errorf("%d drift and %d pods series left, want none", d, p)
	}
	if f.exported.Len() != 0 || testutil.ToFloat64(metrics.WorkloadsDrifting) != 0 {
		t.Errorf("%d workloads exported, %v drifting; want 0", f.exported.Len(), testutil.ToFloat64(metrics.WorkloadsDrifting))
	}
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("Events %q for a gone workload", ev)
	}
}

// TestExportedWorkloadsCapped: past the cap a workload has no series of
// its own but counts in apportion_workloads_drifting.
func TestExportedWorkloadsCapped(t *testing.T) {
	var objs []client.Object
	for _, name := range []string{"a", "b", "c"} {
		objs = append(objs, deployment(name, "r")...)
		objs = append(objs, pods(name, "r", "od-1", 0, 10)...)
	}
	f := newFixture(t, 2, objs...)
	f.pools.noSpot = true
	f.sweep(0)
	f.sweep(after + time.Minute)
	if d := testutil.CollectAndCount(metrics.WorkloadDrift); d != 2 {
		t.Errorf("%d workloads with a drift series, want the cap of 2", d)
	}
	if n := testutil.ToFloat64(metrics.WorkloadsDrifting); n != 3 {
		t.Errorf("apportion_workloads_drifting %v, want 3", n)
	}
	if ev := f.events(); len(ev) != 3 {
		t.Errorf("%d Events, want one SplitDrift per workload: %q", len(ev), ev)
	}
}

// TestNoStrategyOrSkipNotWatched: workloads without a strategy or opted
// out are not looked at.
func TestNoStrategyOrSkipNotWatched(t *testing.T) {
	// Without a strategy, opted out, or in shadow mode (observed, not
	// placed): all on on-demand with spot left out, and nothing reported.
	objs := append(deployment("plain", "a"), pods("plain", "a", "od-1", 0, 10)...)
	objs = append(objs, deployment("skipped", "a")...)
	objs = append(objs, pods("skipped", "a", "od-1", 0, 10)...)
	delete(objs[0].GetAnnotations(), annotations.Strategy)
	objs[len(objs)-12].SetAnnotations(map[string]string{annotations.Strategy: seed004, annotations.Skip: "true"})
	objs = append(objs, deployment("shadowed", "a")...)
	objs = append(objs, pods("shadowed", "a", "od-1", 0, 10)...)
	objs[len(objs)-12].SetAnnotations(map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow})
	f := newFixture(t, 10, objs...)
	f.pools.noSpot = true
	f.sweep(0)
	f.sweep(after + time.Minute)
	if ev := f.events(); len(ev) != 0 || testutil.CollectAndCount(metrics.WorkloadPods) != 0 {
		t.Errorf("Events %q and %d series for workloads not placed", ev, testutil.CollectAndCount(metrics.WorkloadPods))
	}
}

// TestLongReasonShortened: a group's left-out reason (one part per NodePool)
// is cut so that every group's numbers fit in the Event.
func TestLongReasonShortened(t *testing.T) {
	long := strings.Repeat("pool-x: taint not tolerated; ", 40)
	if got := shorten(long); len(got) != maxReason || !strings.HasSuffix(got, "...") {
		t.Errorf("shortened to %d bytes %q, want %d ending in ...", len(got), got, maxReason)
	}
	if got := shorten("short"); got != "short" {
		t.Errorf("a short reason changed: %q", got)
	}
}

// TestJobDriftsOnlyWhileRunning: a Job is split over its live pods; its
// drift is reported while they run, and once they are done the Job is no
// longer watched.
func TestJobDriftsOnlyWhileRunning(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "etl", UID: "etl", Annotations: map[string]string{annotations.Strategy: seed004}}}
	objs := []client.Object{job}
	for _, p := range pods("etl", "x", "od-1", 0, 10) {
		p.SetOwnerReferences(test.OwnedBy("batch/v1", "Job", "etl", "etl"))
		objs = append(objs, p)
	}
	f := newFixture(t, 10, objs...)
	f.pools.noSpot = true
	f.sweep(0)
	f.sweep(12 * time.Minute)
	ev := f.events()
	if len(ev) != 1 || !strings.Contains(ev[0], "SplitDrift") || !strings.Contains(ev[0], "at 10 replicas") {
		t.Fatalf("Events %q, want one SplitDrift at 10 replicas", ev)
	}
	if g := testutil.ToFloat64(metrics.WorkloadDrift.WithLabelValues("web", "Job", "etl")); g != 1 {
		t.Errorf("apportion_workload_drift of the Job %v, want 1", g)
	}
	for _, o := range objs[1:] {
		p := o.(*corev1.Pod)
		p.Status.Phase = corev1.PodSucceeded
		if err := f.client.Status().Update(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	f.sweep(time.Minute)
	if n := testutil.ToFloat64(metrics.WorkloadsDrifting); n != 0 {
		t.Errorf("apportion_workloads_drifting %v after the Job completed, want 0", n)
	}
}
