//go:build e2e

package capacity_test

import (
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/test/framework"
)

// TestJobFallsBackWithoutARetry: a Job (seed 004 on its pod template,
// 900m pods that keep running) whose podFailurePolicy ignores
// DisruptionTarget runs 4 pods (run by the test: kwok would complete
// them), 2 on spot's one c-2x node; the spot pool is
// capped at what it uses and the Job's parallelism raised to 6. The new
// pods decided spot cannot get a node: the pool is marked out, they are
// evicted (the API server marks them DisruptionTarget) and the Job
// recreates them on on-demand, without counting a failure: status.failed
// stays 0 and the Job has no Failed condition.
//
// It needs placement to decide Job pods by NodePool (batch owners) as well
// as the fallback's eviction of Job pods.
func TestJobFallsBackWithoutARetry(t *testing.T) {
	t.Parallel()
	const name, caseName, pool = "etl", "jobfb", "jobfb-spot"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	job := caseJob(ns, name, caseName, 4, 6, 0, true) // backoffLimit 0: any counted failure fails the Job
	job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action:          batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
	}}}
	framework.RunPods(t, env.Kube, ns)
	create(t, job)
	running := waitRunning(t, ns, name, 4, 3*time.Minute)
	for _, p := range running {
		if p.Annotations[annotations.Group] == "" || p.Annotations[annotations.NodePool] == "" {
			t.Fatalf("pod %s of the Job carries no decision: placement does not place Job pods", p.Name)
		}
	}
	if c, want := countByNode(t, caseName, running), expected(t, 4); c[onDemand] != want[onDemand] || c[spot] != want[spot] {
		t.Fatalf("before the cap: counts by node %v, want %v", c, want)
	}
	var used resource.Quantity
	framework.WaitFor(t, time.Minute, "NodePool "+pool+" to count its node", func() error {
		var np karpv1.NodePool
		if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: pool}, &np); err != nil {
			return err
		}
		if n := ptr.Deref(np.Status.Nodes, 0); n < 1 {
			return fmt.Errorf("status.nodes %d", n)
		}
		used = np.Status.Resources[corev1.ResourceCPU]
		return nil
	})
	setCPULimit(t, pool, used)

	stuck := toSpot(t, decided(t, running), 2)
	if stuck == 0 {
		t.Fatalf("seed 004 gives spot none of pods 5 and 6 after %v: the case needs at least one", decided(t, running))
	}
	start := time.Now()
	framework.WaitFor(t, 30*time.Second, "raising the Job's parallelism", func() error {
		var j batchv1.Job
		if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(job), &j); err != nil {
			return err
		}
		j.Spec.Parallelism = ptr.To[int32](6)
		return env.Kube.Update(t.Context(), &j)
	})
	if evs := eventsFor(t, ns, name, "CapacityUnavailable", 3*time.Minute); len(evs) == 0 {
		t.Fatalf("no CapacityUnavailable Event on Job %s within 3m of the parallelism raise", name)
	}
	running = waitRunning(t, ns, name, 6, 3*time.Minute)
	t.Logf("timings: parallelism 4 -> 6 at the cap: all 6 Running %s after", round(time.Since(start)))
	fallback := checkFallbackPods(t, caseName, running)
	if int64(len(fallback)) != stuck {
		t.Errorf("%d fallback pods %v, want the %d spot was to get", len(fallback), names(fallback), stuck)
	}
	if deleted := pods.Deleted(); len(deleted) != len(fallback) {
		t.Errorf("pods deleted %v: want one per fallback pod (%d)", deleted, len(fallback))
	}

	// Every evicted pod has been accounted for by the Job controller (its
	// replacement exists only once it was): none counted as failed.
	var j batchv1.Job
	framework.WaitFor(t, time.Minute, "the Job to account for the evicted pods", func() error {
		if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(job), &j); err != nil {
			return err
		}
		if u := j.Status.UncountedTerminatedPods; u != nil && len(u.Failed)+len(u.Succeeded) > 0 {
			return fmt.Errorf("uncounted terminated pods %+v", *u)
		}
		if n := ptr.Deref(j.Status.Terminating, 0); n != 0 {
			return fmt.Errorf("%d terminating", n)
		}
		return nil
	})
	t.Logf("Job after the fallback: %d pods evicted and recreated on on-demand, status failed %d, active %d, backoffLimit %d",
		len(fallback), j.Status.Failed, j.Status.Active, ptr.Deref(j.Spec.BackoffLimit, -1))
	if j.Status.Failed != 0 || j.Status.Active != 6 {
		t.Errorf("Job status: failed %d, active %d; want 0 failed and 6 active", j.Status.Failed, j.Status.Active)
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed || c.Type == batchv1.JobFailureTarget {
			t.Errorf("Job condition %s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message)
		}
	}
}
