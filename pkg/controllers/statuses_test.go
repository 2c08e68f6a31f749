package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8sevents "k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/controllers/clusterpolicystatus"
	"github.com/apportion-dev/apportion/pkg/controllers/policystatus"
	"github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// TestPolicyStatusesAgreeWithResolver: a CronJob targeted by a
// PlacementPolicy, whose Jobs a ClusterPlacementPolicy of kinds [Job]
// covers. The resolver (what the webhook and placement ask) gives the Jobs
// the CronJob's PlacementPolicy: a namespace's policy, even one of the
// CronJob, comes before every cluster policy. Both statuses must say the
// same: the PlacementPolicy counts the Jobs' live pods, the cluster policy
// covers the Jobs and places none of them.
func TestPolicyStatusesAgreeWithResolver(t *testing.T) {
	const text = "karpenter.sh/capacity-type=on-demand,weight=1:karpenter.sh/capacity-type=spot,weight=1"
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly", UID: "c1"}}
	run := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly-1", UID: "j1",
		OwnerReferences: test.OwnedBy("batch/v1", "CronJob", "nightly", "c1")}}
	pp := test.PlacementPolicy(metav1.ObjectMeta{Namespace: "shop", Name: "cron", UID: "pp", Generation: 1, CreationTimestamp: metav1.NewTime(epoch)},
		v1alpha1.PlacementPolicySpec{Target: v1alpha1.Target{Kind: "CronJob", Name: "nightly"}, Strategy: &v1alpha1.Strategy{Text: text}})
	jobs := &v1alpha1.ClusterPlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "jobs", UID: "cp", Generation: 1, CreationTimestamp: metav1.NewTime(epoch)},
		Spec: v1alpha1.ClusterPlacementPolicySpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}},
			Target: v1alpha1.ClusterTarget{Kinds: []string{"Job"}}, Strategy: v1alpha1.Strategy{Text: text}, Priority: 10},
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "shop"}}},
		test.Node("od", map[string]string{"karpenter.sh/capacity-type": "on-demand"}), test.Node("spot", map[string]string{"karpenter.sh/capacity-type": "spot"}),
		cron, run, pp, jobs,
	}
	// nightly-1: 2 Running (one per group), 1 Pending, 1 Succeeded.
	for i, node := range []string{"od", "spot", "", "od"} {
		phase := []corev1.PodPhase{corev1.PodRunning, corev1.PodRunning, corev1.PodPending, corev1.PodSucceeded}[i]
		objs = append(objs, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprint("nightly-1-", i), UID: types.UID(fmt.Sprint("p", i)),
			OwnerReferences: test.OwnedBy("batch/v1", "Job", run.Name, run.UID)}, NodeName: node, Phase: phase}))
	}
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.PlacementPolicy{}, &v1alpha1.ClusterPlacementPolicy{}).
		WithIndex(&v1alpha1.PlacementPolicy{}, policy.IndexTarget, policy.TargetIndex).
		WithIndex(&corev1.Pod{}, podcache.IndexController, podcache.ControllerIndex).
		Build()
	ctx := context.Background()
	source := policy.NewSource(c).WithClusterPolicies(nil)
	kinds := []schema.GroupVersionKind{workload.DeploymentGVK, workload.JobGVK, workload.CronJobGVK}
	clk := clocktesting.NewFakeClock(epoch)

	// The resolver, as the webhook asks it for the Job's pods.
	top := metadata(t, c, workload.JobGVK, run.Name)
	info, err := workload.ResolveChain(ctx, "shop", workload.Chain{Top: top, Parent: metadata(t, c, workload.CronJobGVK, cron.Name)}, workload.WithPolicies(source))
	if err != nil {
		t.Fatal(err)
	}
	if !info.Found || info.Source.Policy != "shop/cron" || info.Source.Cluster {
		t.Fatalf("the resolver gives the Job %+v, want PlacementPolicy shop/cron", info.Source)
	}

	var p v1alpha1.PlacementPolicy
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "cron"}, &p); err != nil {
		t.Fatal(err)
	}
	if _, err := policystatus.NewController(clk, c, nil, source, policystatus.Options{Kinds: kinds}).Reconcile(ctx, &p); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "cron"}, &p); err != nil {
		t.Fatal(err)
	}
	st := p.Status
	if len(st.Workloads) != 1 || st.Workloads[0].PlacedBy != "PlacementPolicy" || st.Replicas != 3 ||
		len(st.Groups) != 2 || st.Groups[0].Actual != 1 || st.Groups[1].Actual != 1 || !st.WithinQuota {
		t.Errorf("PlacementPolicy status: replicas %d groups %+v within %v workloads %+v: want the Job's 3 live pods, 1 and 1 running, within quota",
			st.Replicas, st.Groups, st.WithinQuota, st.Workloads)
	}

	var cp v1alpha1.ClusterPlacementPolicy
	if err := c.Get(ctx, client.ObjectKey{Name: "jobs"}, &cp); err != nil {
		t.Fatal(err)
	}
	rec := events.NewRecorder(k8sevents.NewFakeRecorder(10))
	if _, err := clusterpolicystatus.NewController(clk, c, source, rec, kinds).Reconcile(ctx, &cp); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "jobs"}, &cp); err != nil {
		t.Fatal(err)
	}
	if cst := cp.Status; cst.Matched != 1 || cst.Placed != 0 || cst.WithinQuota != 0 {
		t.Errorf("ClusterPlacementPolicy status: matched %d placed %d within %d: want the Job covered, not placed (its CronJob's PlacementPolicy places it)",
			cst.Matched, cst.Placed, cst.WithinQuota)
	}
}

func metadata(t *testing.T, c client.Client, gvk schema.GroupVersionKind, name string) *metav1.PartialObjectMetadata {
	t.Helper()
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	obj.SetGroupVersionKind(gvk)
	return obj
}
