package policystatus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const ct = "karpenter.sh/capacity-type"

// pools serves on-demand from "od" and leaves spot out when noSpot.
type pools struct{ noSpot bool }

func (p pools) Choose(_ context.Context, s *strategy.Strategy, _ *corev1.Pod, _ []string, _ string) ([]catalog.Choice, []error, error) {
	choices := make([]catalog.Choice, len(s.Groups))
	errs := make([]error, len(s.Groups))
	for i, g := range s.Groups {
		switch v := g.Selector()[ct]; {
		case v == "spot" && p.noSpot:
			errs[i] = errors.New("no NodePool can serve the group")
		default:
			choices[i].Pool = &catalog.Pool{Name: v}
		}
	}
	return choices, errs, nil
}

var epoch = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func structured() *v1alpha1.Strategy {
	return &v1alpha1.Strategy{Groups: []v1alpha1.Group{
		{Labels: map[string]string{ct: "on-demand"}, Base: 2, Weight: 1},
		{Labels: map[string]string{ct: "spot"}, Weight: 3},
	}}
}

func newPolicy(name string, age time.Duration, target v1alpha1.Target) *v1alpha1.PlacementPolicy {
	return test.PlacementPolicy(metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name), Generation: 3, CreationTimestamp: metav1.NewTime(epoch.Add(-age))},
		v1alpha1.PlacementPolicySpec{Target: target, Strategy: structured(), Mode: v1alpha1.ModeRequired})
}

func fixture(t *testing.T, deployAnnotations map[string]string, objs ...client.Object) client.Client {
	t.Helper()
	return fixtureWith(t, nil, deployAnnotations, objs...)
}

// fixtureWith is fixture with the client's calls intercepted by funcs.
func fixtureWith(t *testing.T, funcs *interceptor.Funcs, deployAnnotations map[string]string, objs ...client.Object) client.Client {
	t.Helper()
	deploy := test.Deployment(metav1.ObjectMeta{Namespace: "web", Name: "nginx", UID: "d1", Labels: map[string]string{"team": "a"}, Annotations: deployAnnotations})
	deploy.Spec.Replicas = ptr.To[int32](10)
	rs := test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc", UID: "rs1"}, deploy)
	objs = append(objs, deploy, rs, test.Node("od-1", map[string]string{ct: "on-demand"}), test.Node("spot-1", map[string]string{ct: "spot"}))
	pod := func(i int, node string, phase corev1.PodPhase) *corev1.Pod {
		return test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("nginx-abc-%d", i), UID: types.UID(fmt.Sprint("p", i))},
			Owner: rs, NodeName: node, Phase: phase})
	}
	for i := range 10 {
		node := "spot-1"
		if i < 4 {
			node = "od-1"
		}
		objs = append(objs, pod(i, node, corev1.PodRunning))
	}
	objs = append(objs, pod(10, "", corev1.PodPending), pod(11, "spot-1", corev1.PodSucceeded))
	b := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.PlacementPolicy{}).
		WithIndex(&v1alpha1.PlacementPolicy{}, policy.IndexTarget, policy.TargetIndex).
		WithIndex(&corev1.Pod{}, podcache.IndexController, podcache.ControllerIndex)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

// testSigner is the placement controller's Signer the controller under test
// shares.
var testSigner = decision.RandomSigner()

func reconcileStatus(t *testing.T, c client.Client, groupCapacity capacity.Capacity, name string) v1alpha1.PlacementPolicyStatus {
	t.Helper()
	ctrl := NewController(clocktesting.NewFakeClock(epoch), c, groupCapacity, policy.NewSource(c),
		Options{Kinds: []schema.GroupVersionKind{workload.DeploymentGVK, workload.StatefulSetGVK, workload.ReplicaSetGVK}, Signer: testSigner})
	ctx := context.Background()
	var p v1alpha1.PlacementPolicy
	if err := c.Get(ctx, client.ObjectKey{Namespace: "web", Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	res, err := ctrl.Reconcile(ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != resyncPeriod {
		t.Errorf("requeue after %v, want %v", res.RequeueAfter, resyncPeriod)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "web", Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return p.Status
}

// condition is st's condition of type typ, the zero one when there is none.
func condition(st v1alpha1.PlacementPolicyStatus, typ string) metav1.Condition {
	return test.Condition(st.Conditions, typ)
}

func TestReconcileWritesStatus(t *testing.T) {
	c := fixture(t, nil, newPolicy("split", time.Hour, v1alpha1.Target{APIVersion: "apps/v1", Kind: "Deployment", Name: "nginx"}))
	st := reconcileStatus(t, c, pools{}, "split")
	want := []v1alpha1.GroupStatus{
		{Key: ct + "=on-demand", NodePool: "on-demand", Desired: 4, Actual: 4},
		{Key: ct + "=spot", NodePool: "spot", Desired: 6, Actual: 6},
	}
	if len(st.Groups) != 2 || st.Groups[0] != want[0] || st.Groups[1] != want[1] {
		t.Errorf("groups %+v, want %+v", st.Groups, want)
	}
	if st.ObservedGeneration != 3 || st.Replicas != 10 || !st.WithinQuota || st.Target != "Deployment/nginx" {
		t.Errorf("status %+v", st)
	}
	if r := condition(st, v1alpha1.ConditionReady); r.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v", r)
	}
}

func TestReconcileConflicts(t *testing.T) {
	target := v1alpha1.Target{Kind: "Deployment", Name: "nginx"}
	t.Run("a newer policy loses to the older", func(t *testing.T) {
		c := fixture(t, nil, newPolicy("old", time.Hour, target),
			newPolicy("new", time.Minute, v1alpha1.Target{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}))
		st := reconcileStatus(t, c, pools{}, "new")
		if cf := condition(st, v1alpha1.ConditionConflict); cf.Status != metav1.ConditionTrue || cf.Reason != v1alpha1.ReasonOlderPolicyWins {
			t.Errorf("Conflict %+v", cf)
		}
		if st = reconcileStatus(t, c, pools{}, "old"); condition(st, v1alpha1.ConditionConflict).Status != metav1.ConditionFalse || !st.WithinQuota {
			t.Errorf("the older policy: %+v", st)
		}
	})
	t.Run("the workload's annotation wins", func(t *testing.T) {
		c := fixture(t, map[string]string{"apportion.dev/strategy": "a=b,weight=1"}, newPolicy("p", time.Hour, target))
		st := reconcileStatus(t, c, pools{}, "p")
		if cf := condition(st, v1alpha1.ConditionConflict); cf.Status != metav1.ConditionTrue || cf.Reason != v1alpha1.ReasonAnnotationWins {
			t.Errorf("Conflict %+v", cf)
		}
	})
	t.Run("the workload's opt-out wins", func(t *testing.T) {
		// Placement leaves an opted-out workload alone: the policy
		// places nothing.
		c := fixture(t, map[string]string{"apportion.dev/skip": "true"}, newPolicy("p", time.Hour, target))
		st := reconcileStatus(t, c, pools{}, "p")
		if cf := condition(st, v1alpha1.ConditionConflict); cf.Reason != v1alpha1.ReasonAnnotationWins || !strings.Contains(cf.Message, "opts out") {
			t.Errorf("Conflict %+v", cf)
		}
		if len(st.Workloads) != 1 || st.Workloads[0].PlacedBy != "Annotation" || st.Replicas != 0 || condition(st, v1alpha1.ConditionReady).Reason != v1alpha1.ReasonConflict {
			t.Errorf("status %+v", st)
		}
	})
	t.Run("group without a NodePool", func(t *testing.T) {
		c := fixture(t, nil, newPolicy("p", time.Hour, target))
		st := reconcileStatus(t, c, pools{noSpot: true}, "p")
		if g := condition(st, v1alpha1.ConditionGroupUnavailable); g.Status != metav1.ConditionTrue || g.Reason != v1alpha1.ReasonNoNodePool {
			t.Errorf("GroupUnavailable %+v", g)
		}
		if st.Groups[0].Desired != 10 || st.WithinQuota {
			t.Errorf("groups %+v within %v", st.Groups, st.WithinQuota)
		}
	})
	t.Run("target missing", func(t *testing.T) {
		c := fixture(t, nil, newPolicy("p", time.Hour, v1alpha1.Target{Kind: "StatefulSet", Name: "nginx"}))
		if r := condition(reconcileStatus(t, c, pools{}, "p"), v1alpha1.ConditionReady); r.Reason != v1alpha1.ReasonTargetNotFound {
			t.Errorf("Ready %+v", r)
		}
	})
}

// TestReadsWorkloadsFromTheCache: the targeted workload's spec.replicas and
// template annotations are read as the typed object, which the manager's
// client serves from its cache; an unstructured read (what the status did,
// through the uncached API reader) would go to the API server once per
// workload per reconcile.
func TestReadsWorkloadsFromTheCache(t *testing.T) {
	var typed, uncached int
	c := fixtureWith(t, &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		switch obj.(type) {
		case *unstructured.Unstructured:
			uncached++
		case *appsv1.Deployment:
			typed++
		}
		return c.Get(ctx, key, obj, opts...)
	}}, nil, newPolicy("split", time.Hour, v1alpha1.Target{Kind: "Deployment", Name: "nginx"}))
	st := reconcileStatus(t, c, pools{}, "split")
	if uncached != 0 || typed != 1 {
		t.Errorf("%d unstructured and %d typed Deployment reads, want the typed one only", uncached, typed)
	}
	if st.Replicas != 10 || st.Groups[0].Desired != 4 || st.Groups[1].Desired != 6 {
		t.Errorf("status %+v: want spec.replicas 10 read from the typed object", st)
	}

	// The pod template's strategy annotation is read from the typed object too.
	tmpl := fixture(t, nil, newPolicy("p", time.Hour, v1alpha1.Target{Kind: "Deployment", Name: "nginx"}))
	var d appsv1.Deployment
	if err := tmpl.Get(context.Background(), client.ObjectKey{Namespace: "web", Name: "nginx"}, &d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Annotations = map[string]string{"apportion.dev/strategy": "a=b,weight=1"}
	if err := tmpl.Update(context.Background(), &d); err != nil {
		t.Fatal(err)
	}
	if cf := condition(reconcileStatus(t, tmpl, pools{}, "p"), v1alpha1.ConditionConflict); cf.Reason != v1alpha1.ReasonAnnotationWins {
		t.Errorf("Conflict %+v: want the template's annotation to win", cf)
	}
}

// TestForgedDecisionsDoNotCount: the status counts Running pods by their
// node's labels, never by decision annotations (but for the signed mark of
// a pod released beyond caps, TestBeyondCapsCountInNoGroup): a pod on a spot
// node whose client wrote it an on-demand decision counts as spot.
func TestForgedDecisionsDoNotCount(t *testing.T) {
	c := fixture(t, nil, newPolicy("split", time.Hour, v1alpha1.Target{Kind: "Deployment", Name: "nginx"}))
	var p corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "web", Name: "nginx-abc-9"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{"apportion.dev/group": ct + "=on-demand", "apportion.dev/nodepool": "on-demand", "apportion.dev/signature": "forged"}
	if err := c.Update(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	st := reconcileStatus(t, c, pools{}, "split")
	if st.Groups[0].Actual != 4 || st.Groups[1].Actual != 6 || !st.WithinQuota {
		t.Errorf("groups %+v within %v: want the forged pod counted on its spot node", st.Groups, st.WithinQuota)
	}
}

// TestBeyondCapsCountInNoGroup: the pods the placement controller released
// beyond caps count in no group, whatever their node. At 10 replicas of 4
// on-demand (max 4) and 4 spot (max 4), 3 of the 6 pods on spot nodes
// released beyond caps leave spot 3 of its 4: off quota, which counted by
// their node (spot 6, 2 of them beyond caps) would look within it. A mark
// apportion did not sign counts for nothing.
func TestBeyondCapsCountInNoGroup(t *testing.T) {
	p := newPolicy("split", time.Hour, v1alpha1.Target{Kind: "Deployment", Name: "nginx"})
	p.Spec.Strategy = &v1alpha1.Strategy{Groups: []v1alpha1.Group{
		{Labels: map[string]string{ct: "on-demand"}, Weight: 1, Max: ptr.To[int32](4)},
		{Labels: map[string]string{ct: "spot"}, Weight: 1, Max: ptr.To[int32](4)},
	}}
	c := fixture(t, nil, p)
	ctx := context.Background()
	mark := func(name string, signer *decision.Signer) {
		t.Helper()
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "web", Name: name}, &pod); err != nil {
			t.Fatal(err)
		}
		decision.MarkBeyondCaps(&pod, decision.Record{Reason: "beyond_caps"}, signer.SignBeyondCaps(pod.UID), nil)
		if err := c.Update(ctx, &pod); err != nil {
			t.Fatal(err)
		}
	}
	mark("nginx-abc-9", decision.RandomSigner())
	if st := reconcileStatus(t, c, pools{}, "split"); st.Groups[1].Actual != 6 || !st.WithinQuota || st.BeyondCaps != 2 {
		t.Errorf("a mark of another key: spot %d, within quota %v, beyond caps %d; want 6, true, 2", st.Groups[1].Actual, st.WithinQuota, st.BeyondCaps)
	}
	for _, name := range []string{"nginx-abc-7", "nginx-abc-8", "nginx-abc-9"} {
		mark(name, testSigner)
	}
	if st := reconcileStatus(t, c, pools{}, "split"); st.Groups[0].Actual != 4 || st.Groups[1].Actual != 3 || st.WithinQuota {
		t.Errorf("3 released beyond caps: groups %+v, within quota %v; want 4 and 3, off quota", st.Groups, st.WithinQuota)
	}
}

// batchPod is a pod of the Job name (uid) in phase, on node.
func batchPod(name string, i int, uid types.UID, node string, phase corev1.PodPhase, ann map[string]string) *corev1.Pod {
	return test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("%s-%d", name, i), UID: types.UID(fmt.Sprintf("%s-p%d", uid, i)),
		Annotations: ann, OwnerReferences: test.OwnedBy("batch/v1", "Job", name, uid)}, NodeName: node, Phase: phase})
}

func reconcileBatch(t *testing.T, c client.Client, name string) v1alpha1.PlacementPolicyStatus {
	t.Helper()
	ctrl := NewController(clocktesting.NewFakeClock(epoch), c, pools{}, policy.NewSource(c),
		Options{Kinds: []schema.GroupVersionKind{workload.DeploymentGVK, workload.JobGVK, workload.CronJobGVK}})
	var p v1alpha1.PlacementPolicy
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "web", Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.Reconcile(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "web", Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return p.Status
}

// TestBatchStatus: a policy targeting a Job, or a CronJob through its Jobs,
// counts their live pods as replicas and their Running pods by node; the
// finished pods count for nothing. A CronJob's Job that carries its own
// strategy is not the CronJob policy's.
func TestBatchStatus(t *testing.T) {
	strategyAnn := map[string]string{"apportion.dev/strategy": "a=b,weight=1"}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "etl", UID: "j1"}}
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nightly", UID: "c1"}}
	run1 := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nightly-1", UID: "j2", OwnerReferences: test.OwnedBy("batch/v1", "CronJob", "nightly", "c1")}}
	run2 := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nightly-2", UID: "j3", Annotations: strategyAnn, OwnerReferences: test.OwnedBy("batch/v1", "CronJob", "nightly", "c1")}}
	objs := []client.Object{job, cron, run1, run2,
		newPolicy("job", time.Hour, v1alpha1.Target{Kind: "Job", Name: "etl"}),
		newPolicy("cron", time.Hour, v1alpha1.Target{Kind: "CronJob", Name: "nightly"})}
	// etl: 6 live pods, 3 on on-demand and 3 on spot, and 4 finished.
	for i := range 6 {
		objs = append(objs, batchPod("etl", i, "j1", map[bool]string{true: "od-1", false: "spot-1"}[i < 3], corev1.PodRunning, nil))
	}
	for i := 6; i < 10; i++ {
		objs = append(objs, batchPod("etl", i, "j1", "spot-1", []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}[i%2], nil))
	}
	// nightly-1: 3 Running (2 on-demand, 1 spot), 1 Pending, 2 Succeeded;
	// nightly-2, which has its own strategy: 3 on spot.
	for i := range 3 {
		objs = append(objs, batchPod("nightly-1", i, "j2", map[bool]string{true: "od-1", false: "spot-1"}[i < 2], corev1.PodRunning, nil))
		objs = append(objs, batchPod("nightly-2", i, "j3", "spot-1", corev1.PodRunning, nil))
	}
	objs = append(objs, batchPod("nightly-1", 3, "j2", "", corev1.PodPending, nil),
		batchPod("nightly-1", 4, "j2", "od-1", corev1.PodSucceeded, nil), batchPod("nightly-1", 5, "j2", "spot-1", corev1.PodSucceeded, nil))
	c := fixture(t, nil, objs...)

	st := reconcileBatch(t, c, "job")
	if st.Replicas != 6 || len(st.Groups) != 2 || st.Groups[0].Actual != 3 || st.Groups[1].Actual != 3 ||
		st.Groups[0].Desired != 3 || st.Groups[1].Desired != 3 || !st.WithinQuota {
		t.Errorf("Job: %+v: want 6 live pods, 3 and 3 running, within quota", st)
	}
	if len(st.Workloads) != 1 || st.Workloads[0].Kind != "Job" || st.Workloads[0].Replicas != 6 || st.Workloads[0].PlacedBy != "PlacementPolicy" {
		t.Errorf("Job: workloads %+v", st.Workloads)
	}

	st = reconcileBatch(t, c, "cron")
	if st.Replicas != 4 || len(st.Groups) != 2 || st.Groups[0].Actual != 2 || st.Groups[1].Actual != 1 || st.Groups[0].Desired+st.Groups[1].Desired != 4 {
		t.Errorf("CronJob: %+v: want nightly-1's 4 live pods, 2 and 1 running, nightly-2 left out", st)
	}
	if len(st.Workloads) != 1 || st.Workloads[0].Kind != "CronJob" || st.Workloads[0].Name != "nightly" {
		t.Errorf("CronJob: workloads %+v", st.Workloads)
	}
	if r := condition(st, v1alpha1.ConditionReady); r.Status != metav1.ConditionTrue {
		t.Errorf("CronJob: Ready %+v", r)
	}
}

// TestBatchAnnotationWins: a Job's pods' strategy (their template's) and a
// CronJob's strategy win over a policy targeting the Job, as placement
// resolves them.
func TestBatchAnnotationWins(t *testing.T) {
	strategyAnn := map[string]string{"apportion.dev/strategy": "a=b,weight=1"}
	for _, tc := range []struct {
		name   string
		objs   []client.Object
		source string
	}{
		{name: "the pods' template", source: "spec.template.metadata.annotations[apportion.dev/strategy]", objs: []client.Object{
			&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "etl", UID: "j1"}},
			batchPod("etl", 0, "j1", "od-1", corev1.PodRunning, strategyAnn)}},
		{name: "the CronJob", source: "CronJob nightly metadata.annotations[apportion.dev/strategy]", objs: []client.Object{
			&batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nightly", UID: "c1", Annotations: strategyAnn}},
			&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "etl", UID: "j1", OwnerReferences: test.OwnedBy("batch/v1", "CronJob", "nightly", "c1")}},
			batchPod("etl", 0, "j1", "od-1", corev1.PodRunning, nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fixture(t, nil, append(tc.objs, newPolicy("p", time.Hour, v1alpha1.Target{Kind: "Job", Name: "etl"}))...)
			st := reconcileBatch(t, c, "p")
			cf := condition(st, v1alpha1.ConditionConflict)
			if cf.Reason != v1alpha1.ReasonAnnotationWins || !strings.Contains(cf.Message, tc.source) {
				t.Errorf("Conflict %+v: want %s to win", cf, tc.source)
			}
			if len(st.Workloads) != 1 || st.Workloads[0].PlacedBy != "Annotation" {
				t.Errorf("workloads %+v", st.Workloads)
			}
		})
	}
}
