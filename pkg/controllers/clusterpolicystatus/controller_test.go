package clusterpolicystatus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8sevents "k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const good = "karpenter.sh/capacity-type=on-demand,base=1,weight=1:karpenter.sh/capacity-type=spot,weight=1"

func cpol(name string, age time.Duration, priority int32) *v1alpha1.ClusterPlacementPolicy {
	return &v1alpha1.ClusterPlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("c-" + name), Generation: 2, CreationTimestamp: metav1.NewTime(epoch.Add(-age))},
		Spec: v1alpha1.ClusterPlacementPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
			Strategy:          v1alpha1.Strategy{Text: good}, Priority: priority,
		},
	}
}

func ns(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func deploy(namespace, name string, annots, template map[string]string) *appsv1.Deployment {
	d := test.Deployment(metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name), Annotations: annots})
	d.Spec.Template.Annotations = template
	return d
}

var kinds = []schema.GroupVersionKind{workload.DeploymentGVK, workload.StatefulSetGVK, workload.ReplicaSetGVK}

// reads counts the client's reads by kind ("DeploymentList in web-a", ...).
type reads map[string]int

func build(t *testing.T, r reads, objs ...client.Object) client.Client {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.ClusterPlacementPolicy{}).
		WithIndex(&v1alpha1.PlacementPolicy{}, policy.IndexTarget, policy.TargetIndex).
		WithIndex(&corev1.Pod{}, podcache.IndexController, podcache.ControllerIndex)
	if r != nil {
		b = b.WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				gvk, _ := apiutil.GVKForObject(list, c.Scheme())
				o := (&client.ListOptions{}).ApplyOptions(opts)
				k := gvk.Kind + " in " + o.Namespace
				if o.FieldSelector != nil && !o.FieldSelector.Empty() {
					k += " index"
				}
				r[k]++
				return c.List(ctx, list, opts...)
			},
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				gvk, _ := apiutil.GVKForObject(obj, c.Scheme())
				r["get "+gvk.Kind]++
				return c.Get(ctx, key, obj, opts...)
			},
		})
	}
	return b.Build()
}

// testSigner is the placement controller's Signer the controller under test
// shares.
var testSigner = decision.RandomSigner()

func reconcileStatus(t *testing.T, c client.Client, rec *k8sevents.FakeRecorder, name string) v1alpha1.ClusterPlacementPolicyStatus {
	t.Helper()
	ctrl := NewController(clocktesting.NewFakeClock(epoch), c, policy.NewSource(c).WithClusterPolicies([]string{"apportion-system"}), events.NewRecorder(rec), kinds).
		WithSigner(testSigner)
	ctx := context.Background()
	var p v1alpha1.ClusterPlacementPolicy
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.Reconcile(ctx, &p); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return p.Status
}

func condition(st v1alpha1.ClusterPlacementPolicyStatus, typ string) metav1.Condition {
	return test.Condition(st.Conditions, typ)
}

// TestStatusCounts: the workloads a policy covers, and of those the ones it
// places: not one with its own strategy, one a PlacementPolicy of its
// namespace targets, one a higher-ranked cluster policy covers, or one
// that opted out (while the policy allows it).
func TestStatusCounts(t *testing.T) {
	web := map[string]string{"team": "web"}
	skip := map[string]string{annotations.Skip: "true"}
	high := cpol("high", time.Minute, 10)
	high.Spec.Target.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "critical"}}
	critical := deploy("web-a", "critical", nil, nil)
	critical.Labels = map[string]string{"tier": "critical"}
	objs := []client.Object{
		ns("web-a", web), ns("web-b", web), ns("db", map[string]string{"team": "db"}), ns("kube-system", web),
		cpol("platform", time.Hour, 0), high,
		deploy("web-a", "plain", nil, nil),
		deploy("web-a", "annotated", map[string]string{annotations.Strategy: good}, nil),
		deploy("web-a", "template", nil, map[string]string{annotations.Strategy: good}),
		deploy("web-a", "skipped", skip, nil),
		deploy("web-a", "skipped-template", nil, skip),
		critical,
		deploy("web-b", "plain", nil, nil),
		deploy("web-b", "own-policy", nil, nil),
		test.PlacementPolicy(metav1.ObjectMeta{Namespace: "web-b", Name: "own", UID: "pp", CreationTimestamp: metav1.NewTime(epoch)},
			v1alpha1.PlacementPolicySpec{Target: v1alpha1.Target{Kind: "Deployment", Name: "own-policy"}, Strategy: &v1alpha1.Strategy{Text: good}}),
		deploy("db", "plain", nil, nil),
		deploy("kube-system", "dns", nil, nil),
	}
	// A ReplicaSet of a Deployment is not a workload of its own.
	objs = append(objs, test.ReplicaSet(metav1.ObjectMeta{Namespace: "web-a", Name: "plain-abc", UID: "rs1"}, objs[6].(*appsv1.Deployment)))
	c := build(t, nil, objs...)
	st := reconcileStatus(t, c, k8sevents.NewFakeRecorder(10), "platform")
	if st.Matched != 8 || st.Placed != 2 || st.Namespaces != 2 {
		t.Errorf("matched %d placed %d namespaces %d, want 8, 2 (web-a/plain, web-b/plain), 2", st.Matched, st.Placed, st.Namespaces)
	}
	if r := condition(st, v1alpha1.ConditionReady); r.Status != metav1.ConditionTrue || r.Reason != v1alpha1.ReasonApplied {
		t.Errorf("Ready %+v", r)
	}
	if r := condition(st, v1alpha1.ConditionConflict); r.Status != metav1.ConditionFalse {
		t.Errorf("Conflict %+v", r)
	}
	if st.Strategy != good || st.ObservedGeneration != 2 {
		t.Errorf("strategy %q generation %d", st.Strategy, st.ObservedGeneration)
	}

	// allowSkip: false places the opted-out workloads too.
	strict := cpol("platform", time.Hour, 0)
	strict.Spec.AllowSkip = ptr.To(false)
	objs[4] = strict
	st = reconcileStatus(t, build(t, nil, objs...), k8sevents.NewFakeRecorder(10), "platform")
	if st.Matched != 8 || st.Placed != 4 {
		t.Errorf("allowSkip false: matched %d placed %d, want 8, 4", st.Matched, st.Placed)
	}

	// The higher-ranked policy places the one workload it covers.
	st = reconcileStatus(t, build(t, nil, objs...), k8sevents.NewFakeRecorder(10), "high")
	if st.Matched != 1 || st.Placed != 1 {
		t.Errorf("high: matched %d placed %d, want 1, 1", st.Matched, st.Placed)
	}
}

// TestStatusTie: two policies of the same priority over one workload both
// report the tie, as a condition and a Warning Event, naming each other;
// the oldest places the workload.
func TestStatusTie(t *testing.T) {
	objs := []client.Object{ns("web-a", map[string]string{"team": "web"}), cpol("older", time.Hour, 5), cpol("newer", time.Minute, 5), cpol("low", 2*time.Hour, 1),
		deploy("web-a", "plain", nil, nil)}
	c := build(t, nil, objs...)
	for _, tc := range []struct {
		name, other string
		placed      int32
	}{{"older", "newer", 1}, {"newer", "older", 0}} {
		rec := k8sevents.NewFakeRecorder(10)
		st := reconcileStatus(t, c, rec, tc.name)
		if st.Placed != tc.placed || len(st.Conflicts) != 1 || st.Conflicts[0] != tc.other {
			t.Errorf("%s: placed %d conflicts %v, want %d [%s]", tc.name, st.Placed, st.Conflicts, tc.placed, tc.other)
		}
		cond := condition(st, v1alpha1.ConditionConflict)
		if cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonPriorityTie || !strings.Contains(cond.Message, tc.other) || !strings.Contains(cond.Message, "Deployment web-a/plain") {
			t.Errorf("%s: Conflict %+v", tc.name, cond)
		}
		select {
		case e := <-rec.Events:
			if !strings.Contains(e, "Warning PriorityTie") || !strings.Contains(e, tc.other) {
				t.Errorf("%s: event %q", tc.name, e)
			}
		default:
			t.Errorf("%s: no Event for the tie", tc.name)
		}
	}
	// The lower priority is outranked, not tied.
	if st := reconcileStatus(t, c, k8sevents.NewFakeRecorder(10), "low"); len(st.Conflicts) != 0 || condition(st, v1alpha1.ConditionConflict).Status != metav1.ConditionFalse || st.Placed != 0 || st.Matched != 1 {
		t.Errorf("low: %+v", st)
	}
}

// TestStatusCost: a reconcile lists workloads only in the namespaces the
// policy covers, and reads pods only of the workloads it places, through
// the controller index: its cost follows the placed workloads, not the
// cluster's pods nor its other namespaces.
func TestStatusCost(t *testing.T) {
	web := map[string]string{"team": "web"}
	objs := []client.Object{ns("web-a", web), ns("other", nil), cpol("platform", time.Hour, 0), node("n", "on-demand")}
	for i := range 5 {
		d := deploy("web-a", fmt.Sprint("d", i), nil, nil)
		rs := test.ReplicaSet(metav1.ObjectMeta{Namespace: "web-a", Name: fmt.Sprint("d", i, "-abc"), UID: types.UID(fmt.Sprint("rs", i))}, d)
		objs = append(objs, d, rs, deploy("other", fmt.Sprint("d", i), nil, nil))
		for j := range 20 {
			objs = append(objs, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web-a", Name: fmt.Sprint("p", i, "-", j), UID: types.UID(fmt.Sprint("p", i, "-", j))},
				Owner: rs, NodeName: "n", Phase: corev1.PodRunning}))
		}
	}
	// A workload with its own strategy: covered, not placed, its pods unread.
	own := deploy("web-a", "own", map[string]string{annotations.Strategy: good}, nil)
	ownRS := test.ReplicaSet(metav1.ObjectMeta{Namespace: "web-a", Name: "own-abc", UID: "rs-own"}, own)
	objs = append(objs, own, ownRS, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web-a", Name: "own-1", UID: "own-1"}, Owner: ownRS, NodeName: "n", Phase: corev1.PodRunning}))
	r := reads{}
	st := reconcileStatus(t, build(t, r, objs...), k8sevents.NewFakeRecorder(10), "platform")
	if st.Matched != 6 || st.Placed != 5 {
		t.Fatalf("matched %d placed %d, want 6, 5", st.Matched, st.Placed)
	}
	for k, n := range r {
		if strings.HasSuffix(k, " in other") || (strings.Contains(k, "Pod") && k != "PodList in web-a index") {
			t.Errorf("%d reads of %q", n, k)
		}
	}
	// Per placed workload, one index read per ReplicaSet; each node once.
	if n := r["PodList in web-a index"]; n != 5 {
		t.Errorf("%d pod reads, want 5 (one per placed ReplicaSet): %v", n, r)
	}
	if n := r["get Node"]; n != 1 {
		t.Errorf("%d node reads, want 1", n)
	}
	// Per covered workload without a strategy of its own: its namespace's
	// PlacementPolicies (two index reads); per covered namespace and kind,
	// a list, and the ReplicaSets once more for the placed Deployments.
	if n := r["PlacementPolicyList in web-a index"]; n != 2*5 {
		t.Errorf("%d PlacementPolicy reads, want %d", n, 2*5)
	}
	if n := r["DeploymentList in web-a"] + r["StatefulSetList in web-a"] + r["ReplicaSetList in web-a"]; n != 4 {
		t.Errorf("%d workload lists in web-a, want 4 (one per kind, one for the pods): %v", n, r)
	}
}

func node(name, capacityType string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if capacityType != "" {
		n.Labels = map[string]string{"karpenter.sh/capacity-type": capacityType}
	}
	return n
}

// running adds a Deployment in namespace and its Running pods, one per node
// named.
func running(namespace, name string, nodes ...string) []client.Object {
	d := deploy(namespace, name, nil, nil)
	rs := test.ReplicaSet(metav1.ObjectMeta{Namespace: namespace, Name: name + "-abc", UID: types.UID(namespace + "-" + name + "-abc")}, d)
	objs := []client.Object{d, rs}
	for i, n := range nodes {
		objs = append(objs, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprint(name, "-", i), UID: types.UID(fmt.Sprint(namespace, "-", name, "-", i))},
			Owner: rs, NodeName: n, Phase: corev1.PodRunning}))
	}
	// A Pending pod counts in no split.
	objs = append(objs, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-pending", UID: types.UID(namespace + "-" + name + "-pending")}, Owner: rs, Phase: corev1.PodPending}))
	return objs
}

// TestStatusQuota: of the workloads a policy places, those within quota by
// their Running pods' nodes are counted, and the others named, sorted, at
// most policy.MaxOffStrategy, with the group off its quota.
func TestStatusQuota(t *testing.T) {
	web := map[string]string{"team": "web"}
	objs := []client.Object{ns("web-a", web), ns("web-b", web), cpol("platform", time.Hour, 0), node("od", "on-demand"), node("spot", "spot")}
	// good at 4: on-demand 2-3, spot 1-2.
	objs = append(objs, running("web-a", "even", "od", "od", "spot", "spot")...)
	objs = append(objs, running("web-a", "idle")...)
	for i := range 12 {
		objs = append(objs, running("web-b", fmt.Sprintf("all-spot-%02d", i), "spot", "spot", "spot", "spot")...)
	}
	st := reconcileStatus(t, build(t, nil, objs...), k8sevents.NewFakeRecorder(10), "platform")
	if st.Placed != 14 || st.WithinQuota != 2 {
		t.Errorf("placed %d within quota %d, want 14, 2", st.Placed, st.WithinQuota)
	}
	if len(st.OffStrategy) != policy.MaxOffStrategy {
		t.Fatalf("offStrategy %v, want %d entries", st.OffStrategy, policy.MaxOffStrategy)
	}
	want := "web-b/Deployment/all-spot-00: group 1 (karpenter.sh/capacity-type=on-demand) 0 running, quota 2-3"
	if st.OffStrategy[0] != want || st.OffStrategy[9] != "web-b/Deployment/all-spot-09: group 1 (karpenter.sh/capacity-type=on-demand) 0 running, quota 2-3" {
		t.Errorf("offStrategy %q, want first %q, through all-spot-09", st.OffStrategy, want)
	}
}

// TestStatusQuotaCaps: pods beyond every cap run anywhere, and are not
// off strategy; a capped group above its cap otherwise is.
func TestStatusQuotaCaps(t *testing.T) {
	web := map[string]string{"team": "web"}
	p := cpol("platform", time.Hour, 0)
	p.Spec.Strategy.Text = "karpenter.sh/capacity-type=on-demand,weight=1,max=2:karpenter.sh/capacity-type=spot,weight=1,max=1"
	objs := []client.Object{ns("web-a", web), p, node("od", "on-demand"), node("spot", "spot"), node("plain", "")}
	// At 5 Running, 2 beyond caps: they run on a node of no group, or
	// past their group's cap.
	objs = append(objs, running("web-a", "beyond", "od", "od", "spot", "plain", "plain")...)
	objs = append(objs, running("web-a", "beyond-in-group", "od", "od", "od", "spot")...)
	// At 3 Running, none beyond caps: the third on-demand pod is over.
	objs = append(objs, running("web-a", "over", "od", "od", "od")...)
	st := reconcileStatus(t, build(t, nil, objs...), k8sevents.NewFakeRecorder(10), "platform")
	if st.Placed != 3 || st.WithinQuota != 2 {
		t.Errorf("placed %d within quota %d, want 3, 2", st.Placed, st.WithinQuota)
	}
	if want := []string{"web-a/Deployment/over: group 1 (karpenter.sh/capacity-type=on-demand) 3 running, quota 2"}; !slices.Equal(st.OffStrategy, want) {
		t.Errorf("offStrategy %q, want %q", st.OffStrategy, want)
	}
}

// TestStatusQuotaReleasedBeyondCaps: the pods the placement controller
// released beyond caps count in no group, whatever node they run on. At 7
// replicas of 2 on-demand (max 2) and 3 spot (max 3), 2 such pods on a spot
// node next to 2 and 3 are within quota; 3 of them next to 2 and 2 are not
// (spot runs 2 of its 3), though counted by their node spot would run 5. A
// mark apportion did not sign counts for nothing.
func TestStatusQuotaReleasedBeyondCaps(t *testing.T) {
	web := map[string]string{"team": "web"}
	p := cpol("platform", time.Hour, 0)
	p.Spec.Strategy.Text = "karpenter.sh/capacity-type=on-demand,weight=1,max=2:karpenter.sh/capacity-type=spot,weight=1,max=3"
	objs := []client.Object{ns("web-a", web), p, node("od", "on-demand"), node("spot", "spot")}
	beyondCaps := func(objs []client.Object, n int) []client.Object {
		for _, o := range objs {
			if pod, ok := o.(*corev1.Pod); ok && pod.Spec.NodeName == "spot" && n > 0 {
				decision.MarkBeyondCaps(pod, decision.Record{Reason: "beyond_caps"}, testSigner.SignBeyondCaps(pod.UID), nil)
				n--
			}
		}
		return objs
	}
	// A mark apportion did not sign is a client's: the pod counts by its
	// node, and at 5 Running, none beyond caps, the workload is within
	// quota.
	forged := running("web-a", "forged", "od", "od", "spot", "spot", "spot")
	forged[len(forged)-2].(*corev1.Pod).Annotations = map[string]string{annotations.BeyondCaps: "true"}
	objs = append(objs, forged...)
	objs = append(objs, beyondCaps(running("web-a", "steady", "od", "od", "spot", "spot", "spot", "spot", "spot"), 2)...)
	objs = append(objs, beyondCaps(running("web-a", "churned", "od", "od", "spot", "spot", "spot", "spot", "spot"), 3)...)
	st := reconcileStatus(t, build(t, nil, objs...), k8sevents.NewFakeRecorder(10), "platform")
	if st.Placed != 3 || st.WithinQuota != 2 {
		t.Errorf("placed %d within quota %d, want 3, 2", st.Placed, st.WithinQuota)
	}
	if want := []string{"web-a/Deployment/churned: group 2 (karpenter.sh/capacity-type=spot) 2 running, quota 3"}; !slices.Equal(st.OffStrategy, want) {
		t.Errorf("offStrategy %q, want %q", st.OffStrategy, want)
	}
}

// TestStatusBatch: Jobs and CronJobs are counted over their live pods. A
// Job whose pods carry a strategy (their template's) is covered, not
// placed. A CronJob is split over the live pods of its Jobs, but for a Job
// with a strategy of its own.
func TestStatusBatch(t *testing.T) {
	const ct = "karpenter.sh/capacity-type"
	own := map[string]string{annotations.Strategy: good}
	job := func(name string, uid types.UID, ann map[string]string, cron *batchv1.CronJob) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web-a", Name: name, UID: uid, Annotations: ann}}
		if cron != nil {
			j.OwnerReferences = test.OwnedBy("batch/v1", "CronJob", cron.Name, cron.UID)
		}
		return j
	}
	pod := func(j *batchv1.Job, i int, node string, phase corev1.PodPhase, ann map[string]string) *corev1.Pod {
		return test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web-a", Name: fmt.Sprintf("%s-%d", j.Name, i), UID: types.UID(fmt.Sprintf("%s-%d", j.UID, i)),
			Annotations: ann, OwnerReferences: test.OwnedBy("batch/v1", "Job", j.Name, j.UID)}, NodeName: node, Phase: phase})
	}
	jobs, crons := cpol("jobs", time.Hour, 0), cpol("crons", time.Hour, 0)
	jobs.Spec.Target.Kinds, crons.Spec.Target.Kinds = []string{"Job"}, []string{"CronJob"}
	nightly := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "web-a", Name: "nightly", UID: "c1"}}
	etl, plain := job("etl", "j1", nil, nil), job("plain", "j2", nil, nil)
	run1, run2 := job("nightly-1", "j3", nil, nightly), job("nightly-2", "j4", own, nightly)
	objs := []client.Object{ns("web-a", map[string]string{"team": "web"}), jobs, crons, nightly, etl, plain, run1, run2,
		test.Node("od", map[string]string{ct: "on-demand"}), test.Node("spot", map[string]string{ct: "spot"}),
		pod(etl, 0, "spot", corev1.PodRunning, own), pod(etl, 1, "spot", corev1.PodRunning, own),
		pod(plain, 0, "od", corev1.PodRunning, nil), pod(plain, 1, "od", corev1.PodRunning, nil),
		pod(plain, 2, "spot", corev1.PodRunning, nil), pod(plain, 3, "spot", corev1.PodPending, nil),
		pod(run1, 0, "spot", corev1.PodRunning, nil), pod(run1, 1, "spot", corev1.PodRunning, nil),
		pod(run1, 2, "od", corev1.PodSucceeded, nil),
		pod(run2, 0, "od", corev1.PodRunning, nil), pod(run2, 1, "od", corev1.PodRunning, nil),
	}
	c := build(t, nil, objs...)
	batchKinds := append(slices.Clone(kinds), workload.JobGVK, workload.CronJobGVK)
	reconcile := func(name string) v1alpha1.ClusterPlacementPolicyStatus {
		t.Helper()
		ctrl := NewController(clocktesting.NewFakeClock(epoch), c, policy.NewSource(c).WithClusterPolicies(nil), events.NewRecorder(k8sevents.NewFakeRecorder(10)), batchKinds)
		var p v1alpha1.ClusterPlacementPolicy
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		if _, err := ctrl.Reconcile(context.Background(), &p); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Status
	}
	// etl's pods and nightly-2 carry their own strategy; plain runs 2 on
	// on-demand and 1 on spot of its 4 live pods (within quota), nightly-1
	// its 2 live pods on spot (off: its finished pod does not count).
	st := reconcile("jobs")
	if st.Matched != 4 || st.Placed != 2 || st.WithinQuota != 1 || len(st.OffStrategy) != 1 || !strings.HasPrefix(st.OffStrategy[0], "web-a/Job/nightly-1: ") {
		t.Errorf("jobs: matched %d placed %d within %d off %v, want 4 Jobs, plain and nightly-1 placed, plain within", st.Matched, st.Placed, st.WithinQuota, st.OffStrategy)
	}
	// With the Jobs covered by "jobs", so is the CronJob: a Job of it
	// with nothing of its own is "jobs"' (a cluster policy covering the
	// Job comes before one covering its CronJob). Without it, nightly-1's
	// 2 spot pods are off quota and nightly-2's on-demand pods are not
	// the CronJob's.
	if crons := reconcile("crons"); crons.Matched != 1 || crons.Placed != 0 {
		t.Errorf("crons beside jobs: matched %d placed %d, want the CronJob covered, not placed", crons.Matched, crons.Placed)
	}
	if err := c.Delete(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	st = reconcile("crons")
	want := "web-a/CronJob/nightly: group 1 (" + ct + "=on-demand) 0 running"
	if st.Matched != 1 || st.Placed != 1 || st.WithinQuota != 0 || len(st.OffStrategy) != 1 || !strings.HasPrefix(st.OffStrategy[0], want) {
		t.Errorf("crons: matched %d placed %d within %d off %v, want the CronJob placed and off (%s...)", st.Matched, st.Placed, st.WithinQuota, st.OffStrategy, want)
	}
}
