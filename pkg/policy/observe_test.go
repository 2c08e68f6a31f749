package policy

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// TestObserve: what the engine says places a workload is what the resolver
// answers for its pods. The namespace holds cluster policies "all"
// (priority 0, every kind) and "jobs" (priority 5, kinds [Job]), and a
// PlacementPolicy "cron" of the CronJob with-pp. A CronJob is placed as a
// Job of it with nothing of its own would be, and counts the live pods of
// the Jobs placed that way only.
func TestObserve(t *testing.T) {
	const text = "karpenter.sh/capacity-type=on-demand,weight=1:karpenter.sh/capacity-type=spot,weight=1"
	shop := map[string]string{"team": "shop"}
	all, jobs := cpol("all", 2, 0), cpol("jobs", 1, 5)
	all.Spec.NamespaceSelector.MatchLabels, jobs.Spec.NamespaceSelector.MatchLabels = shop, shop
	jobs.Spec.Target.Kinds = []string{"Job"}
	pp := func(name, kind, target string) *v1alpha1.PlacementPolicy {
		p := pol(name, 1, v1alpha1.Target{Kind: kind, Name: target}, &v1alpha1.Strategy{Text: text})
		p.Namespace = "shop"
		return p
	}
	objs := []client.Object{namespace("shop", shop), all, jobs, pp("cron", "CronJob", "with-pp"), pp("own", "Job", "with-pp-3")}
	deploy := func(name string, ann map[string]string) {
		d := test.Deployment(metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(name), Annotations: ann})
		d.Spec.Replicas = ptr.To[int32](7)
		objs = append(objs, d)
	}
	deploy("plain", nil)
	deploy("skipped", map[string]string{annotations.Skip: "true"})
	cron := func(name string, ann map[string]string) *batchv1.CronJob {
		c := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(name), Annotations: ann}}
		objs = append(objs, c)
		return c
	}
	// job adds a Job of c with live pods, and one finished.
	job := func(c *batchv1.CronJob, name string, live int, ann map[string]string) {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(name), Annotations: ann,
			OwnerReferences: test.OwnedBy("batch/v1", "CronJob", c.Name, c.UID)}}
		objs = append(objs, j)
		for i := range live + 1 {
			phase := corev1.PodRunning
			if i == live {
				phase = corev1.PodSucceeded
			}
			objs = append(objs, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprint(name, "-", i), UID: types.UID(fmt.Sprint(name, "-", i)),
				OwnerReferences: test.OwnedBy("batch/v1", "Job", j.Name, j.UID)}, NodeName: "n", Phase: phase}))
		}
	}
	withPP := cron("with-pp", nil)
	job(withPP, "with-pp-1", 2, nil)
	job(withPP, "with-pp-2", 3, map[string]string{annotations.Skip: "true"})
	job(withPP, "with-pp-3", 4, nil) // targeted by "own"
	bare := cron("bare", nil)
	job(bare, "bare-1", 1, nil)
	annotated := cron("annotated", map[string]string{annotations.Strategy: text})
	job(annotated, "annotated-1", 5, nil)
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).
		WithIndex(&v1alpha1.PlacementPolicy{}, IndexTarget, TargetIndex).
		WithIndex(&corev1.Pod{}, podcache.IndexController, podcache.ControllerIndex).Build()
	source := NewSource(c).WithClusterPolicies(nil)
	x := NewObserver(c, source)
	ctx := context.Background()
	get := func(gvk schema.GroupVersionKind, name string) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{}
		o.SetGroupVersionKind(gvk)
		if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: name}, o); err != nil {
			t.Fatal(err)
		}
		o.SetGroupVersionKind(gvk)
		return o
	}
	for _, tc := range []struct {
		gvk      schema.GroupVersionKind
		name     string
		placedBy string // "ns/name" of a PlacementPolicy, "cluster name", "" for nothing
		source   string // where the annotation that places it is
		replicas int64
	}{
		{gvk: workload.DeploymentGVK, name: "plain", placedBy: "cluster all", replicas: 7},
		{gvk: workload.DeploymentGVK, name: "skipped", replicas: 7},
		// A namespace's policy of the CronJob comes before "jobs", which
		// covers its Jobs.
		{gvk: workload.CronJobGVK, name: "with-pp", placedBy: "shop/cron", replicas: 2},
		{gvk: workload.JobGVK, name: "with-pp-1", placedBy: "shop/cron", replicas: 2},
		{gvk: workload.JobGVK, name: "with-pp-2", replicas: 3},
		{gvk: workload.JobGVK, name: "with-pp-3", placedBy: "shop/own", replicas: 4},
		// "jobs" covers the Jobs of bare, and so bare: it outranks "all".
		{gvk: workload.CronJobGVK, name: "bare", placedBy: "cluster jobs", replicas: 1},
		{gvk: workload.JobGVK, name: "bare-1", placedBy: "cluster jobs", replicas: 1},
		{gvk: workload.CronJobGVK, name: "annotated", source: "metadata.annotations[apportion.dev/strategy]", replicas: 5},
		{gvk: workload.JobGVK, name: "annotated-1", source: "CronJob annotated metadata.annotations[apportion.dev/strategy]", replicas: 5},
	} {
		t.Run(tc.gvk.Kind+" "+tc.name, func(t *testing.T) {
			top := get(tc.gvk, tc.name)
			o, err := x.Observe(ctx, top)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"shop/cron", "shop/own", "cluster all", "cluster jobs"} {
				name, cluster := p, false
				if _, err := fmt.Sscanf(p, "cluster %s", &name); err == nil {
					cluster = true
				}
				if got := o.PlacedBy(name, cluster); got != (p == tc.placedBy) {
					t.Errorf("placed by %s: %v, want %v (%+v)", p, got, !got, o.Info.Source)
				}
			}
			if tc.source != "" && o.Info.Source.String() != tc.source {
				t.Errorf("source %q, want %q", o.Info.Source, tc.source)
			}
			if o.Replicas != tc.replicas {
				t.Errorf("replicas %d, want %d", o.Replicas, tc.replicas)
			}
			if tc.gvk != workload.JobGVK {
				return
			}
			// The resolver, asked for one of the Job's pods as the webhook
			// asks it.
			var pod corev1.Pod
			if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: tc.name + "-0"}, &pod); err != nil {
				t.Fatal(err)
			}
			info, err := workload.Resolve(ctx, c, "shop", &pod, workload.WithPolicies(source))
			if err != nil {
				t.Fatal(err)
			}
			if info.Source != o.Info.Source || info.Skip != o.Info.Skip {
				t.Errorf("the resolver says %+v skip %v, the engine %+v skip %v", info.Source, info.Skip, o.Info.Source, o.Info.Skip)
			}
		})
	}
	// The Deployment's Running pods, through its ReplicaSet.
	d := get(workload.DeploymentGVK, "plain")
	rs := test.ReplicaSet(metav1.ObjectMeta{Namespace: "shop", Name: "plain-abc", UID: "rs"}, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "plain", UID: "plain"}})
	if err := c.Create(ctx, rs); err != nil {
		t.Fatal(err)
	}
	for i, phase := range []corev1.PodPhase{corev1.PodRunning, corev1.PodRunning, corev1.PodPending} {
		node := "n"
		if phase == corev1.PodPending {
			node = ""
		}
		if err := c.Create(ctx, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprint("plain-", i), UID: types.UID(fmt.Sprint("plain-", i))},
			Owner: rs, NodeName: node, Phase: phase})); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, test.Node("n", map[string]string{"karpenter.sh/capacity-type": "spot"})); err != nil {
		t.Fatal(err)
	}
	o, err := NewObserver(c, source).Observe(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	nodes, beyondCaps, err := x.Running(ctx, o)
	if err != nil || len(nodes) != 2 || nodes[0]["karpenter.sh/capacity-type"] != "spot" || beyondCaps != 0 {
		t.Errorf("node labels %v, %v: want the 2 Running pods' node", nodes, err)
	}
}
