//go:build e2e

package capacity_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/test/framework"
)

// TestJobSkipsAFullNodePool: a Job of 12 completions, 6 at a time,
// backoffLimit 0 and no podFailurePolicy (so no pod of it may be deleted),
// whose strategy gives spot 3 pods in 4, while the only spot NodePool has
// cpu limit 0 and no node. No pod is ever pinned to that pool: each goes
// to on-demand, its decision record saying the spot pool is full, and the
// Job completes with no failure.
//
// (The spot pods used to be placed in the pool, stay Pending for good, and
// the Job never completed.)
func TestJobSkipsAFullNodePool(t *testing.T) {
	t.Parallel()
	const name, caseName, pool = "batch", "full", "full-spot"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	job := caseJob(ns, name, caseName, 6, 12, 0, false)
	start := time.Now()
	create(t, job)
	var j batchv1.Job
	framework.WaitFor(t, 4*time.Minute, "the Job to complete", func() error {
		if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(job), &j); err != nil {
			return err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("succeeded %d, failed %d, active %d; pods pinned to %s: %v", j.Status.Succeeded, j.Status.Failed, j.Status.Active, pool, pods.PinnedTo(pool))
	})
	t.Logf("Job complete %s after its creation: succeeded %d, failed %d; %d pods seen", round(time.Since(start)), j.Status.Succeeded, j.Status.Failed, pods.Created())
	if j.Status.Succeeded != 12 || j.Status.Failed != 0 {
		t.Errorf("Job status: succeeded %d, failed %d; want 12 and 0", j.Status.Succeeded, j.Status.Failed)
	}
	if pinned := pods.PinnedTo(pool); len(pinned) > 0 {
		t.Errorf("pods pinned to the full NodePool %s: %v", pool, pinned)
	}
	var list corev1.PodList
	if err := env.Kube.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	fallback := 0
	for _, p := range list.Items {
		if p.Annotations[annotations.NodePool] != "full-od" {
			t.Errorf("pod %s placed in NodePool %q, want full-od", p.Name, p.Annotations[annotations.NodePool])
		}
		if p.Annotations[annotations.Fallback] == "" {
			continue
		}
		fallback++
		if r := record(t, p); r.Reason != recordFallback || !strings.Contains(strings.Join(r.Out, " "), pool+": full: ") {
			t.Errorf("fallback pod %s: record %+v, want reason fallback and %s full under out", p.Name, r, pool)
		} else if fallback == 1 {
			t.Logf("decision record of %s: %+v", p.Name, r)
		}
	}
	if fallback == 0 {
		t.Errorf("no pod placed by fallback: the strategy gave spot nothing, the case is vacuous")
	}
}

// TestWorkloadMarkEndsWithTheLimit: a Deployment of 9 (seed 004) whose spot
// pool's memory limit leaves room for no node, while the pool's
// requirements do not tell how small its instance types can be: Karpenter
// says the pool exceeds its limits, apportion marks it out for this
// workload alone, and the 9 pods run on on-demand. The limit is then
// raised: the workload's mark ends at once, so a scale-up to 18 puts its
// new pods on spot (by quota, no fallback), and a scale-down to 12 ends
// within quota by the nodes' labels.
//
// (The workload's mark used to last its TTL: the 9 new pods went to
// on-demand again, and the scale-down left 12 on-demand, none on spot.)
func TestWorkloadMarkEndsWithTheLimit(t *testing.T) {
	t.Parallel()
	const name, caseName, pool = "web", "scoped", "scoped-spot"
	ns := newNamespace(t)
	d := deployment(ns, name, caseName, 9, "900m", nil)
	create(t, d)
	running := waitRunning(t, ns, name, 9, 3*time.Minute)
	if c := countByNode(t, caseName, running); c[spot] != 0 || c[onDemand] != 9 {
		t.Fatalf("at the limit: counts by node %v, want all 9 on on-demand", c)
	}
	evs := eventsFor(t, ns, name, "CapacityUnavailable", time.Minute)
	if len(evs) == 0 || !strings.Contains(evs[0].Message, "NodePool "+pool+" gives this workload no capacity (limits:") {
		t.Fatalf("CapacityUnavailable Events %v, want one saying %s gives this workload no capacity (limits)", messages(evs), pool)
	}
	t.Logf("at the limit: 9 Running on on-demand; Event: %s", evs[0].Message)

	lifted := func() float64 {
		text, err := env.Replicas[0].Metrics()
		if err != nil {
			return -1
		}
		const series = `apportion_capacity_rechecks_total{reason="limits",result="lifted"} `
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, series); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
		return 0
	}
	before := lifted()
	raised := time.Now()
	setLimits(t, pool, karpv1.Limits{corev1.ResourceCPU: resource.MustParse("200"), corev1.ResourceMemory: resource.MustParse("1000Gi")})
	framework.WaitFor(t, time.Minute, "a limits mark lifted", func() error {
		if n := lifted(); n <= before {
			return fmt.Errorf("apportion_capacity_rechecks_total{limits,lifted} %v", n)
		}
		return nil
	})
	// The scale-up comes 5 s after the raise, as an operator's would.
	time.Sleep(time.Until(raised.Add(5 * time.Second)))
	old := uids(running)
	start := time.Now()
	scale(t, d, 18)
	running = waitRunning(t, ns, name, 18, 4*time.Minute)
	t.Logf("9 -> 18 after the limit was raised: all Running %s after the scale-up, counts by node %v", round(time.Since(start)), countByNode(t, caseName, running))
	groups := nodeGroups(t, caseName, running)
	for _, p := range running {
		if old[p.UID] {
			continue
		}
		if groups[p.UID] != spot || p.Annotations[annotations.Group] != spot || p.Annotations[annotations.Fallback] != "" {
			t.Errorf("new pod %s: decided %s (fallback %q), runs on %s; want spot", p.Name,
				p.Annotations[annotations.Group], p.Annotations[annotations.Fallback], groups[p.UID])
		}
	}

	waitDeletionCosts(t, ns, name)
	const target = 12
	scale(t, d, target)
	var left []corev1.Pod
	framework.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d live pods", target), func() error {
		if left = livePods(t, ns, name); len(left) != target {
			return fmt.Errorf("%d live pods", len(left))
		}
		return nil
	})
	desc, ok := quota(t, countByNode(t, caseName, left))
	if !ok {
		t.Errorf("after the scale-down 18 -> %d: %s, want within quota", target, desc)
	}
	t.Logf("scale-down 18 -> %d: %s", target, desc)
}
