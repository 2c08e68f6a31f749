//go:build e2e

package batch_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/workload"
	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
	"github.com/apportion-dev/apportion/test/quota"
)

const (
	ct       = karpv1.CapacityTypeLabelKey
	onDemand = ct + "=" + karpv1.CapacityTypeOnDemand
	spot     = ct + "=" + karpv1.CapacityTypeSpot
	// seed004: on-demand base 2 weight 1, spot weight 3.
	seed004 = onDemand + ",base=2,weight=1:" + spot + ",weight=3"
	// runFor is how long framework.RunPods keeps a pod Running.
	runFor = framework.RunForAnnotation
)

func newNamespace(t *testing.T) string {
	t.Helper()
	return framework.NewNamespace(t, env.Kube, framework.TestNamespaceName(t, "batch"), nil)
}

// podTemplate is the pod template of a Job: one small container, run by the
// runner for run (forever when 0), never restarted.
func podTemplate(run time.Duration, ann map[string]string) corev1.PodTemplateSpec {
	ann = maps.Clone(ann)
	if run > 0 {
		if ann == nil {
			ann = map[string]string{}
		}
		ann[runFor] = run.String()
	}
	spec := framework.AppPodSpec("registry.invalid/batch:1")
	spec.RestartPolicy = corev1.RestartPolicyNever
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.ProcessPodLabel: ""}, Annotations: ann}, Spec: spec}
}

// ownedBy lists the pods of ns whose controller has uid.
func ownedBy(t *testing.T, ns string, uid string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := env.Kube.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if c := metav1.GetControllerOf(&p); c != nil && string(c.UID) == uid {
			out = append(out, p)
		}
	}
	return out
}

func live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// groups counts the pods by their decision's group; undecided pods (still
// gated) are left out.
func groups(pods []corev1.Pod, keep func(*corev1.Pod) bool) (map[string]int64, int64) {
	out := map[string]int64{}
	var n int64
	for i := range pods {
		if g := pods[i].Annotations[annotations.Group]; g != "" && keep(&pods[i]) {
			out[g]++
			n++
		}
	}
	return out, n
}

// liveWithinQuota says why the live decided pods of a Job running
// parallelism pods at a time are off the strategy's quota, by the rule
// `make bench-scale --batch` holds its samples to as well (test/quota): at
// parallelism, within quota; with fewer, no group above its quota at
// parallelism. "" when they are within it.
func liveWithinQuota(t *testing.T, raw string, counts map[string]int64, parallelism int64) string {
	t.Helper()
	c, err := compiled.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return quota.Live(c, counts, parallelism).String()
}

// TestIndexedJobWithinQuotaAmongLivePods: an Indexed Job of 36 completions,
// 12 at a time, whose pods run 3 s each: at every sample taken while the
// Job still creates pods, its live decided pods are within quota (with 12
// live) or short only by pods finished and not yet replaced (no group above
// its quota at 12), and it completes with no failed pod.
func TestIndexedJobWithinQuotaAmongLivePods(t *testing.T) {
	ns := newNamespace(t)
	framework.RunPods(t, env.Kube, ns)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "render", Annotations: map[string]string{annotations.Strategy: seed004}},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To[int32](12), Completions: ptr.To[int32](36), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			BackoffLimit: ptr.To[int32](0), Template: podTemplate(3*time.Second, nil),
		},
	}
	framework.Create(t, env.Kube, job)
	deadline := time.Now().Add(3 * time.Minute)
	samples, full, tail, maxLive := 0, 0, 0, int64(0)
	var off []string
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the Job did not complete in 3m: %+v", job.Status)
		}
		if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(job), job); err != nil {
			t.Fatal(err)
		}
		pods := ownedBy(t, ns, string(job.UID))
		counts, n := groups(pods, live)
		// Once the Job has created its last pod, the pods left finish in
		// whatever order and no new pod corrects their split: only the
		// samples taken while pods are still to come are held to the quota.
		_, created := groups(pods, func(*corev1.Pod) bool { return true })
		if created >= 36 {
			tail++
		} else if n > 0 {
			samples++
			if n >= 12 {
				full++
			}
			maxLive = max(maxLive, n)
			if why := liveWithinQuota(t, seed004, counts, 12); why != "" {
				off = append(off, fmt.Sprintf("%d live: %s", n, why))
			}
		}
		if job.Status.Succeeded == 36 || job.Status.Failed > 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if job.Status.Failed != 0 || job.Status.Succeeded != 36 {
		t.Errorf("the Job ended with %d succeeded, %d failed; want 36 and 0", job.Status.Succeeded, job.Status.Failed)
	}
	if len(off) > 0 {
		t.Errorf("%d of %d samples off quota among the live pods: %s", len(off), samples, strings.Join(off, " | "))
	}
	all, _ := groups(ownedBy(t, ns, string(job.UID)), func(*corev1.Pod) bool { return true })
	t.Logf("%d samples while the Job created pods, up to %d live pods, within quota; %d samples after its last pod, not held to it; all the Job's pods by group: %v", samples, maxLive, tail, all)
	if full == 0 {
		t.Errorf("no sample with all 12 pods live and decided: the quota at full parallelism was never checked")
	}
	if maxLive < 6 || samples < 5 {
		t.Errorf("%d samples, at most %d live decided pods: too few to tell", samples, maxLive)
	}
}

// waitDecided waits until the uid's n pods are all decided and returns
// their groups.
func waitDecided(t *testing.T, ns, what, uid string, n int64) map[string]int64 {
	t.Helper()
	var counts map[string]int64
	framework.WaitFor(t, 90*time.Second, fmt.Sprintf("%d decided pods of %s", n, what), func() error {
		var got int64
		counts, got = groups(ownedBy(t, ns, uid), live)
		if got != n {
			return fmt.Errorf("%d decided: %v", got, counts)
		}
		return nil
	})
	return counts
}

// perOwner is a strategy whose split tells whether an owner of 4 pods was
// counted alone: its 4 pods all go on-demand (the base), while counted
// after another owner's 4 they would go mostly spot.
const perOwner = onDemand + ",base=4,weight=1:" + spot + ",weight=3"

// alone checks that an owner's 4 pods were split as perOwner splits 4.
func alone(t *testing.T, what string, counts map[string]int64) {
	t.Helper()
	if counts[onDemand] != 4 || counts[spot] != 0 {
		t.Errorf("%s: split %v, want its 4 pods on-demand (the base, counted alone)", what, counts)
	}
}

// TestCronJobJobsSplitSeparately: two Jobs of a CronJob (made from its
// jobTemplate by hand, as `kubectl create job --from=cronjob/...` does),
// the second created once the first is placed: each is split within quota
// at its own pods, the strategy coming from the CronJob.
func TestCronJobJobsSplitSeparately(t *testing.T) {
	ns := newNamespace(t)
	framework.RunPods(t, env.Kube, ns)
	cron := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly", Annotations: map[string]string{annotations.Strategy: perOwner}},
		Spec: batchv1.CronJobSpec{
			Schedule: "0 3 1 1 *", Suspend: ptr.To(true),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](4), Template: podTemplate(0, nil)}},
		},
	}
	framework.Create(t, env.Kube, cron)
	for i := range 2 {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("nightly-manual-%d", i),
				Annotations:     map[string]string{"cronjob.kubernetes.io/instantiate": "manual"},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cron, batchv1.SchemeGroupVersion.WithKind("CronJob"))}},
			Spec: *cron.Spec.JobTemplate.Spec.DeepCopy(),
		}
		framework.Create(t, env.Kube, job)
		alone(t, job.Name, waitDecided(t, ns, job.Name, string(job.UID), 4))
	}
}

// TestWorkflowPodsSplitPerWorkflow: pods created as Argo's controller
// creates them (controller reference to the Workflow, its
// spec.podMetadata's annotations copied onto each) are split per Workflow.
func TestWorkflowPodsSplitPerWorkflow(t *testing.T) {
	ns := newNamespace(t)
	for i := range 2 {
		wf := &unstructured.Unstructured{}
		wf.SetGroupVersionKind(workload.WorkflowGVK)
		wf.SetNamespace(ns)
		wf.SetName(fmt.Sprintf("etl-%d", i))
		if err := unstructured.SetNestedStringMap(wf.Object, map[string]string{annotations.Strategy: perOwner}, "spec", "podMetadata", "annotations"); err != nil {
			t.Fatal(err)
		}
		framework.Create(t, env.Kube, wf)
		for step := range 4 {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-step-%d", wf.GetName(), step),
					Labels:          map[string]string{"workflows.argoproj.io/workflow": wf.GetName()},
					Annotations:     map[string]string{annotations.Strategy: perOwner, "workflows.argoproj.io/node-name": fmt.Sprintf("%s[%d]", wf.GetName(), step)},
					OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(wf, workload.WorkflowGVK)}},
				Spec: framework.AppPodSpec("registry.invalid/argo-step:1"),
			}
			pod.Spec.RestartPolicy = corev1.RestartPolicyNever
			framework.Create(t, env.Kube, pod)
		}
		alone(t, wf.GetName(), waitDecided(t, ns, wf.GetName(), string(wf.GetUID()), 4))
	}
}
