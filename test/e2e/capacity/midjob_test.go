//go:build e2e

package capacity_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/workload"
	"github.com/apportion-dev/apportion/test/framework"
)

// spotFits is how many 900m pods the jobretry and jobkeep spot pools hold:
// their cpu limit (2) allows one c-2x node, which takes two.
const spotFits = 2

// caseJob is a Job of seed 004 (on its pod template) whose 900m pods select
// the case's NodePools, with no podFailurePolicy. With run, its pods are run
// by the test (framework.RunPods) until deleted or for their
// framework.RunForAnnotation; else kwok completes them as soon as they run.
func caseJob(ns, name, caseName string, parallelism, completions, backoffLimit int32, run bool) *batchv1.Job {
	spec := framework.AppPodSpec("public.ecr.aws/nginx/nginx:latest")
	spec.RestartPolicy = corev1.RestartPolicyNever
	spec.NodeSelector = map[string]string{caseLabel: caseName}
	spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("900m")
	labels := map[string]string{"app": name}
	if run {
		labels[framework.ProcessLabel] = ""
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			Parallelism:  ptr.To(parallelism),
			Completions:  ptr.To(completions),
			BackoffLimit: ptr.To(backoffLimit),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{annotations.Strategy: seed004}},
				Spec:       spec,
			},
		},
	}
}

// midJob is a caseJob run by the test, parallelism and completions 6 (3
// pods decided spot, 3 on-demand), its pods running for runFor (until
// deleted when "").
func midJob(ns, name, caseName string, backoffLimit int32, runFor string) *batchv1.Job {
	j := caseJob(ns, name, caseName, 6, 6, backoffLimit, true)
	if runFor != "" {
		j.Spec.Template.Annotations[framework.RunForAnnotation] = runFor
	}
	return j
}

// fillMidJob creates the Job (run by the test) and waits until its 6 pods
// are decided and the spot pool runs spotFits of them: the pool is full,
// and the rest of the pods decided spot cannot get a node. It returns how
// many they are (at least 1).
func fillMidJob(t *testing.T, job *batchv1.Job, pool string) int {
	t.Helper()
	framework.RunPods(t, env.Kube, job.Namespace)
	create(t, job)
	var stuck int
	framework.WaitFor(t, 3*time.Minute, fmt.Sprintf("6 decided pods of Job %s, %d of them Running on %s", job.Name, spotFits, pool), func() error {
		live := livePods(t, job.Namespace, job.Name)
		var onPool, running int
		for _, p := range live {
			if p.Annotations[annotations.NodePool] == "" {
				return fmt.Errorf("pod %s carries no decision", p.Name)
			}
			if p.Annotations[annotations.NodePool] == pool {
				onPool++
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
		}
		if len(live) != 6 || running != spotFits {
			return fmt.Errorf("%d live pods, %d decided for %s, %d of them Running", len(live), onPool, pool, running)
		}
		stuck = onPool - running
		return nil
	})
	if stuck < 1 {
		t.Fatalf("seed 004 gives %s no more than the %d pods it holds: the case needs one more", pool, spotFits)
	}
	t.Logf("Job %s: %d pods decided for %s cannot get a node", job.Name, stuck, pool)
	return stuck
}

// ownerEvents are the Events with reason about the object name in ns, once
// there are at least n of them (waiting up to wait).
func ownerEvents(t *testing.T, ns, name, reason string, n int, wait time.Duration) []string {
	t.Helper()
	var msgs []string
	framework.WaitFor(t, wait, fmt.Sprintf("%d %s Events on %s", n, reason, name), func() error {
		msgs = framework.Messages(eventsFor(t, ns, name, reason, 0))
		if len(msgs) < n {
			return fmt.Errorf("%d: %q", len(msgs), msgs)
		}
		return nil
	})
	return msgs
}

// mentions reports whether some message contains s.
func mentions(msgs []string, s string) bool {
	return slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, s) })
}

// TestJobRetriesWhenPoolFillsMidJob: a Job without a podFailurePolicy,
// backoffLimit 3, whose pods run 60 s; the spot pool is full once it runs
// two of them, so the third pod decided spot cannot get a node. Once past
// the capacity timeout (30 s here) it is evicted, at the cost of a retry the
// Job has: a Normal Event PendingPodDeleted on the Job names the pod, the
// pool and the retry. The Job recreates it on on-demand and completes, and
// its status.failed is the number of retries apportion reported.
func TestJobRetriesWhenPoolFillsMidJob(t *testing.T) {
	t.Parallel()
	const name, pool = "etl", "jobretry-spot"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	job := midJob(ns, name, "jobretry", 3, "60s")
	stuck := fillMidJob(t, job, pool)

	msgs := ownerEvents(t, ns, name, "PendingPodDeleted", stuck, 4*time.Minute)
	t.Logf("PendingPodDeleted: %q", msgs)
	for i := 1; i <= stuck; i++ {
		if want := fmt.Sprintf("used retry %d of backoffLimit 3", i); !mentions(msgs, want) {
			t.Errorf("no PendingPodDeleted says %q: %q", want, msgs)
		}
	}
	deleted := pods.Deleted()
	for _, m := range msgs {
		if !strings.Contains(m, "stuck on NodePool "+pool) || !slices.ContainsFunc(deleted, func(p string) bool { return strings.HasPrefix(m, "deleted pod "+p+" ") }) {
			t.Errorf("PendingPodDeleted %q names no pod deleted on %s (deleted: %v)", m, pool, deleted)
		}
	}

	var j batchv1.Job
	framework.WaitFor(t, 5*time.Minute, "the Job to finish", func() error {
		if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(job), &j); err != nil {
			return err
		}
		if jobFinished(&j) == "" {
			return fmt.Errorf("succeeded %d, failed %d, active %d", j.Status.Succeeded, j.Status.Failed, j.Status.Active)
		}
		return nil
	})
	t.Logf("Job %s: succeeded %d, failed %d of backoffLimit 3; apportion reported %d retries", jobFinished(&j), j.Status.Succeeded, j.Status.Failed, len(msgs))
	if got := jobFinished(&j); got != string(batchv1.JobComplete) {
		t.Errorf("the Job ended %s, want %s", got, batchv1.JobComplete)
	}
	if int(j.Status.Failed) != len(msgs) || len(msgs) != stuck || len(deleted) != stuck {
		t.Errorf("status.failed %d, PendingPodDeleted Events %d, pods deleted %d, pods stuck on %s %d: want all equal",
			j.Status.Failed, len(msgs), len(deleted), pool, stuck)
	}
	if kept := eventsFor(t, ns, name, "PendingPodKept", 0); len(kept) != 0 {
		t.Errorf("PendingPodKept on a Job with retries left: %q", framework.Messages(kept))
	}
}

// jobFinished is the Job's Complete or Failed condition that is True, or "".
func jobFinished(j *batchv1.Job) string {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return string(c.Type)
		}
	}
	return ""
}

// TestJobKeptWhenNoRetryLeft: the same Job with backoffLimit 0: deleting
// the stuck pod would fail the Job, so it stays Pending, the Job's Warning
// Event PendingPodKept names it and says why, and nothing of the Job is
// deleted or counted as failed.
func TestJobKeptWhenNoRetryLeft(t *testing.T) {
	t.Parallel()
	const name, pool = "etl", "jobkeep-spot"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	job := midJob(ns, name, "jobkeep", 0, "")
	stuck := fillMidJob(t, job, pool)

	msgs := ownerEvents(t, ns, name, "PendingPodKept", 1, 4*time.Minute)
	t.Logf("PendingPodKept: %q", msgs)
	if !strings.HasPrefix(msgs[0], "NodePool "+pool+" cannot get capacity; apportion leaves pod ") ||
		!strings.Contains(msgs[0], "the Job's backoffLimit 0 leaves no retry (0 failed)") {
		t.Errorf("PendingPodKept %q; want it to name the pool and say backoffLimit 0 leaves no retry", msgs[0])
	}
	var pending []corev1.Pod
	for _, p := range livePods(t, ns, name) {
		if p.Spec.NodeName == "" && p.Annotations[annotations.NodePool] == pool {
			pending = append(pending, p)
		}
	}
	if len(pending) != stuck {
		t.Errorf("%d pods pending on %s (%v), want the %d stuck ones kept", len(pending), pool, names(pending), stuck)
	}
	if !slices.ContainsFunc(pending, func(p corev1.Pod) bool { return strings.Contains(msgs[0], "leaves pod "+p.Name+" pending") }) {
		t.Errorf("PendingPodKept %q names none of the stuck pods %v", msgs[0], names(pending))
	}
	if deleted := pods.Deleted(); len(deleted) != 0 {
		t.Errorf("pods deleted %v: want none", deleted)
	}
	var j batchv1.Job
	if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(job), &j); err != nil {
		t.Fatal(err)
	}
	if j.Status.Failed != 0 || jobFinished(&j) != "" {
		t.Errorf("Job status.failed %d, finished %q; want 0 and not finished", j.Status.Failed, jobFinished(&j))
	}
	if del := eventsFor(t, ns, name, "PendingPodDeleted", 0); len(del) != 0 {
		t.Errorf("PendingPodDeleted on a Job without retries: %q", framework.Messages(del))
	}
}

// allSpot sends every pod to spot.
const allSpot = "karpenter.sh/capacity-type=spot,weight=1:karpenter.sh/capacity-type=on-demand,weight=0"

// argoWorkflow creates a Workflow as Argo would have it while its step
// shard runs (there is no Argo controller here: the Workflow's CRD only)
// and its pod, as Argo's controller creates it (controller reference to
// the Workflow, its node's ID in workflows.argoproj.io/node-id): with
// retryStrategy rs, the pod's node is the first attempt of a Retry node;
// without, the step's only node.
func argoWorkflow(t *testing.T, ns, name string, rs map[string]any) *corev1.Pod {
	t.Helper()
	shard := map[string]any{"name": "shard", "container": map[string]any{"image": "public.ecr.aws/nginx/nginx:latest"}}
	podNode := name + "-1"
	nodes := map[string]any{podNode: map[string]any{"id": podNode, "name": name + ".shard", "type": "Pod", "templateName": "shard", "phase": "Pending"}}
	if rs != nil {
		shard["retryStrategy"] = rs
		nodes[name+"-r"] = map[string]any{"id": name + "-r", "name": name + ".shard", "type": "Retry", "templateName": "shard", "phase": "Running",
			"children": []any{podNode}}
	}
	wf := &unstructured.Unstructured{Object: map[string]any{
		"spec":   map[string]any{"entrypoint": "shard", "templates": []any{shard}, "podMetadata": map[string]any{"annotations": map[string]any{annotations.Strategy: allSpot}}},
		"status": map[string]any{"phase": "Running", "nodes": nodes},
	}}
	wf.SetGroupVersionKind(workload.WorkflowGVK)
	wf.SetNamespace(ns)
	wf.SetName(name)
	create(t, wf)

	spec := framework.AppPodSpec("public.ecr.aws/nginx/nginx:latest")
	spec.RestartPolicy = corev1.RestartPolicyNever
	spec.NodeSelector = map[string]string{caseLabel: "wfretry"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podNode,
			Labels:          map[string]string{"app": name, "workflows.argoproj.io/workflow": name},
			Annotations:     map[string]string{annotations.Strategy: allSpot, "workflows.argoproj.io/node-name": name + ".shard", "workflows.argoproj.io/node-id": podNode},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(wf, workload.WorkflowGVK)}},
		Spec: spec,
	}
	create(t, pod)
	return pod
}

// TestWorkflowPodsWhenPoolIsOut: two Workflows' pods stuck on a spot pool
// that gets no node. Past the capacity timeout, the pod of the step whose
// retryStrategy retries a deleted pod (retryPolicy OnError, limit 2) is
// deleted, for Argo to run the step again with a new pod, and the Workflow's
// Normal Event PendingPodDeleted names it and the retry; the pod of the step
// without a retryStrategy is kept, and its Workflow's Warning Event
// PendingPodKept says why.
func TestWorkflowPodsWhenPoolIsOut(t *testing.T) {
	t.Parallel()
	const pool = "wfretry-spot"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	retrying := argoWorkflow(t, ns, "retrying", map[string]any{"limit": "2", "retryPolicy": "OnError"})
	plain := argoWorkflow(t, ns, "plain", nil)
	for _, name := range []string{"retrying", "plain"} {
		framework.WaitFor(t, time.Minute, "the pod of Workflow "+name+" decided for "+pool, func() error {
			live := livePods(t, ns, name)
			if len(live) != 1 {
				return fmt.Errorf("%d pods", len(live))
			}
			if got := live[0].Annotations[annotations.NodePool]; got != pool {
				return fmt.Errorf("pod %s decided for %q", live[0].Name, got)
			}
			return nil
		})
	}

	msgs := ownerEvents(t, ns, "retrying", "PendingPodDeleted", 1, 4*time.Minute)
	t.Logf("PendingPodDeleted: %q", msgs)
	if want := "deleted pod " + retrying.Name + " stuck on NodePool " + pool; !strings.HasPrefix(msgs[0], want) ||
		!strings.Contains(msgs[0], "used retry 1 of its step's retryStrategy limit 2") {
		t.Errorf("PendingPodDeleted %q; want it to start %q and name retry 1 of limit 2", msgs[0], want)
	}
	kept := ownerEvents(t, ns, "plain", "PendingPodKept", 1, 2*time.Minute)
	t.Logf("PendingPodKept: %q", kept)
	if !strings.Contains(kept[0], "leaves pod "+plain.Name+" pending") || !strings.Contains(kept[0], "its step has no retryStrategy that would retry it") {
		t.Errorf("PendingPodKept %q; want it to name pod %s and say its step has no retryStrategy", kept[0], plain.Name)
	}
	if deleted := pods.Deleted(); !slices.Equal(deleted, []string{retrying.Name}) {
		t.Errorf("pods deleted %v, want %s only", deleted, retrying.Name)
	}
	var p corev1.Pod
	if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(plain), &p); err != nil || p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
		t.Errorf("pod %s: error %v, node %q, deleting %v; want it kept pending", plain.Name, err, p.Spec.NodeName, p.DeletionTimestamp != nil)
	}
	for _, wf := range []string{"retrying", "plain"} {
		if other := map[string]string{"retrying": "PendingPodKept", "plain": "PendingPodDeleted"}[wf]; len(eventsFor(t, ns, wf, other, 0)) != 0 {
			t.Errorf("Workflow %s has a %s Event", wf, other)
		}
	}
}
