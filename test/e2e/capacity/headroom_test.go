//go:build e2e

package capacity_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/test/framework"
)

// allRunningWithin is the contract for a pool whose limits leave less room
// than one more node: every pod runs within this time of the scale-up.
const allRunningWithin = 60 * time.Second

// (a) Limits that leave less room than the pool's smallest instance type
// while its usage stays below them — the commonest way a capped NodePool
// runs out. Karpenter says so in each stuck pod's FailedScheduling Event
// ("all available instance types exceed limits for nodepool"), so the pool
// is out for every workload within seconds and the pods run on the other
// groups. Varied: the resource (cpu, memory), the number of pools serving
// the group (two spot pools, both capped), and the pod size. Then the caps
// are lifted: the pools are back at once and a scale-up ends within quota
// by node labels.
func TestHeadroomFallsBackInSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		caseName    string
		pools       []string // the capped spot pools, in Karpenter's order
		cpu, memory string   // each pod's requests
		replicas    int32
	}{
		// c-2x (2 cpu) holds two 900m pods; cpu 3 leaves 1 after it.
		{"hrcpu", []string{"hrcpu-spot"}, "900m", "64Mi", 8},
		// c-2x (4Gi) holds two 1500Mi pods; memory 6Gi leaves 2Gi after it.
		{"hrmem", []string{"hrmem-spot"}, "100m", "1500Mi", 8},
		// 1500m pods: one on a c-2x of spot-a (cpu 3), two on a c-4x of
		// spot-b (cpu 5); then neither can launch another node.
		{"hrtwo", []string{"hrtwo-spot-a", "hrtwo-spot-b"}, "1500m", "64Mi", 10},
	} {
		t.Run(tc.caseName, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			pods := watchPods(t, ns)
			d := deployment(ns, tc.caseName, tc.caseName, 0, tc.cpu, nil)
			d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse(tc.memory)
			create(t, d)
			start := time.Now()
			scale(t, d, tc.replicas)
			running := waitRunning(t, ns, tc.caseName, int(tc.replicas), allRunningWithin)
			elapsed := time.Since(start)

			evs := eventsFor(t, ns, tc.caseName, "CapacityUnavailable", 5*time.Second)
			named := map[string]string{}
			for _, e := range evs {
				for _, p := range tc.pools {
					if strings.Contains(e.Message, "NodePool "+p+" cannot get capacity (limits: ") {
						named[p] = e.Message
					}
				}
			}
			if _, ok := named[tc.pools[0]]; !ok {
				t.Errorf("no CapacityUnavailable Event says NodePool %s is out for its limits; Events: %v", tc.pools[0], messages(evs))
			}
			for p, msg := range named {
				if !strings.Contains(msg, " left") || !strings.Contains(msg, "exceed limits for nodepool") {
					t.Errorf("CapacityUnavailable for %s: %q; want the headroom left and Karpenter's words", p, msg)
				}
			}
			fallback := checkFallbackPods(t, tc.caseName, running)
			if len(fallback) == 0 {
				t.Errorf("no fallback pod: the case did not cap spot below its share")
			}
			for _, p := range fallback {
				if r := record(t, p); len(r.Out) == 0 || !strings.Contains(strings.Join(r.Out, " "), "limits") {
					t.Errorf("fallback pod %s: decision record out %v, want why spot was out (limits)", p.Name, r.Out)
				}
			}
			usage := map[string]string{}
			for _, p := range tc.pools {
				var np karpv1.NodePool
				if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: p}, &np); err != nil {
					t.Fatal(err)
				}
				usage[p] = fmt.Sprintf("uses %v of %v", np.Status.Resources, np.Spec.Limits)
			}
			t.Logf("timings: 0 -> %d all Running %s after the scale-up (contract %s); counts by node %v; %d fallback pods; %d pods deleted; pools %v",
				tc.replicas, round(elapsed), allRunningWithin, countByNode(t, tc.caseName, running), len(fallback), len(pods.Deleted()), usage)
			for p, msg := range named {
				t.Logf("Event for %s: %s", p, msg)
			}

			// The caps lifted: the pools are back at once (no waiting out
			// the TTL), and a scale-up lands within quota by node labels.
			for _, p := range tc.pools {
				setLimits(t, p, karpv1.Limits{corev1.ResourceCPU: resource.MustParse("200"), corev1.ResourceMemory: resource.MustParse("1000Gi")})
			}
			have := countByNode(t, tc.caseName, running)
			next := reachableWithinQuota(t, have, int(tc.replicas))
			start = time.Now()
			scale(t, d, int32(next))
			running = waitRunning(t, ns, tc.caseName, next, 3*time.Minute)
			counts := countByNode(t, tc.caseName, running)
			desc, ok := quota(t, counts)
			if !ok {
				t.Errorf("after the caps were lifted, %d -> %d: %s", tc.replicas, next, desc)
			}
			t.Logf("caps lifted: %d -> %d all Running %s after the scale-up; %s", tc.replicas, next, round(time.Since(start)), desc)
		})
	}
}

// reachableWithinQuota is the smallest replica count above n at which the
// strategy's quota holds with on-demand's count as it is now (the new pods
// all going to spot, which fallback left short).
func reachableWithinQuota(t *testing.T, have map[string]int64, n int) int {
	t.Helper()
	_, m := method(t, seed004)
	for next := n + 2; next <= 4*n; next++ {
		if m.WithinQuota([]int64{have[onDemand], int64(next) - have[onDemand]}, apportion.All) {
			return next
		}
	}
	t.Fatalf("no replica count up to %d puts on-demand %d within quota", 4*n, have[onDemand])
	return 0
}

// setLimits replaces a NodePool's limits.
func setLimits(t *testing.T, pool string, limits karpv1.Limits) {
	t.Helper()
	framework.WaitFor(t, 30*time.Second, "setting the limits of "+pool, func() error {
		var np karpv1.NodePool
		if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: pool}, &np); err != nil {
			return err
		}
		np.Spec.Limits = limits
		return env.Kube.Update(t.Context(), &np)
	})
}

func messages(evs []corev1.Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Message)
	}
	return out
}

// (b) Tenant input cannot reach another namespace. In the tenant's
// namespace: bare pods with hand-written decision annotations (one with a
// signature copied from a real decision), a Deployment whose pod template
// carries them, and a workload with a real strategy whose pods fit no
// instance type — all with apportion.dev/capacity-timeout: 1s, all Pending
// well past the suite's timeout. Another namespace's workload on the same
// NodePools keeps its exact split, loses no pod, and no CapacityUnavailable
// Event names the pool; the never-fitting workload gets PodDoesNotFit and
// is left alone.
func TestForgedDecisionsStayInTheirNamespace(t *testing.T) {
	t.Parallel()
	const pool = "forged-spot"
	victimNS := newNamespace(t)
	tenantNS := victimNS + "-tenant"
	if err := env.Kube.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Kube.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}})
	})
	victimPods, tenantPods := watchPods(t, victimNS), watchPods(t, tenantNS)

	victim := deployment(victimNS, "victim", "forged", 2, "100m", nil)
	create(t, victim)
	first := waitRunning(t, victimNS, "victim", 2, 2*time.Minute)
	copied := first[0].Annotations[annotations.Signature]
	if copied == "" {
		t.Fatalf("victim pod %s has no %s", first[0].Name, annotations.Signature)
	}

	forged := func(sig string) map[string]string {
		a := map[string]string{annotations.Group: spot, annotations.NodePool: pool,
			annotations.Decision: `{"strategy":"x","counts":[0,0],"reason":"quota"}`, annotations.CapacityTimeout: "1s"}
		if sig != "" {
			a[annotations.Signature] = sig
		}
		return a
	}
	for i, sig := range []string{"", "forged", copied} {
		create(t, impossiblePod(tenantNS, fmt.Sprintf("bare-%d", i), forged(sig)))
	}
	template := deployment(tenantNS, "forged-template", "forged", 2, "500", nil)
	delete(template.Annotations, annotations.Strategy)
	template.Spec.Template.Annotations = forged(copied)
	pinToPool(&template.Spec.Template.Spec, pool)
	create(t, template)
	// A real strategy, pods that fit no instance type: placed and signed
	// by apportion, then left alone.
	huge := deployment(tenantNS, "too-big", "forged", 3, "500", map[string]string{annotations.CapacityTimeout: "1s"})
	create(t, huge)

	wait := capacityTimeout + 20*time.Second
	t.Logf("tenant pods created; waiting %s (past the suite's --capacity-timeout %s)", wait, capacityTimeout)
	time.Sleep(wait)

	var pending corev1.PodList
	if err := env.Kube.List(t.Context(), &pending, client.InNamespace(tenantNS)); err != nil {
		t.Fatal(err)
	}
	unscheduled := 0
	for _, p := range pending.Items {
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
			unscheduled++
		}
	}
	if unscheduled < 8 {
		t.Errorf("%d tenant pods unscheduled, want all 8 (3 bare, 2 forged template, 3 too big): the case needs them Pending", unscheduled)
	}

	start := time.Now()
	scale(t, victim, 10)
	running := waitRunning(t, victimNS, "victim", 10, 2*time.Minute)
	want := expected(t, 10)
	if got := countByNode(t, "forged", running); got[onDemand] != want[onDemand] || got[spot] != want[spot] {
		t.Errorf("victim counts by node %v, want exactly %v", got, want)
	}
	if fb := checkFallbackPods(t, "forged", running); len(fb) > 0 {
		t.Errorf("victim fallback pods %v: spot was left out for it", names(fb))
	}
	if deleted := victimPods.Deleted(); len(deleted) > 0 {
		t.Errorf("victim pods deleted: %v", deleted)
	}
	if deleted := tenantPods.Deleted(); len(deleted) > 0 {
		t.Errorf("tenant pods deleted: %v (forged ones must be ignored, never-fitting ones left alone)", deleted)
	}
	var all corev1.EventList
	if err := env.Kube.List(t.Context(), &all); err != nil {
		t.Fatal(err)
	}
	for _, e := range all.Items {
		if e.Reason == "CapacityUnavailable" && strings.Contains(e.Message, "NodePool "+pool) {
			t.Errorf("CapacityUnavailable on %s/%s names %s: %q", e.Namespace, e.InvolvedObject.Name, pool, e.Message)
		}
	}
	misfit := eventsFor(t, tenantNS, "too-big", "PodDoesNotFit", 30*time.Second)
	if len(misfit) == 0 {
		t.Errorf("no PodDoesNotFit Event on the never-fitting Deployment too-big")
	} else {
		t.Logf("PodDoesNotFit: %s", misfit[0].Message)
	}
	t.Logf("victim 2 -> 10 all Running %s after the scale-up, counts by node %v; tenant: %d pods unscheduled for %s",
		round(time.Since(start)), countByNode(t, "forged", running), unscheduled, wait)
}

// impossiblePod is a bare pod of the forged case pinned to the spot pool,
// asking for more cpu than any instance type has.
func impossiblePod(ns, name string, ann map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{caseLabel: "forged"},
			Containers: []corev1.Container{{Name: "app", Image: "public.ecr.aws/nginx/nginx:latest",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500")}}}},
		},
	}
	pinToPool(&p.Spec, "forged-spot")
	return p
}

// pinToPool adds the required karpenter.sh/nodepool In [pool] a decision
// would write.
func pinToPool(spec *corev1.PodSpec, pool string) {
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{pool}},
		}}},
	}}}
}
