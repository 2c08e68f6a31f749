//go:build e2e

package capacity_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/test/framework"
)

// recordFallback is the decision record's reason for a pod placed while a
// group was out of capacity.
const recordFallback = "fallback"

// checkFallbackPods checks the pods placed by fallback: annotated with the
// spot group, decided (and running) on on-demand, record reason fallback;
// and that every other pod runs in the group it was decided for. It returns
// the fallback pods.
func checkFallbackPods(t *testing.T, caseName string, pods []corev1.Pod) []corev1.Pod {
	t.Helper()
	groups := nodeGroups(t, caseName, pods)
	var fallback []corev1.Pod
	for _, p := range pods {
		decided := p.Annotations[annotations.Group]
		if decided != groups[p.UID] {
			t.Errorf("pod %s decided for %s runs on a %s node", p.Name, decided, groups[p.UID])
		}
		fb, ok := p.Annotations[annotations.Fallback]
		if !ok {
			continue
		}
		fallback = append(fallback, p)
		if fb != spot || decided != onDemand {
			t.Errorf("fallback pod %s: %s %q, group %s; want %s and %s", p.Name, annotations.Fallback, fb, decided, spot, onDemand)
		}
		if r := record(t, p); r.Reason != recordFallback {
			t.Errorf("fallback pod %s: decision reason %q, want %q", p.Name, r.Reason, recordFallback)
		}
	}
	return fallback
}

// firstCreated is the earliest creation among pods, after start.
func firstCreated(pods []corev1.Pod) time.Time {
	var first time.Time
	for _, p := range pods {
		if c := p.CreationTimestamp.Time; first.IsZero() || c.Before(first) {
			first = c
		}
	}
	return first
}

// (a) The spot NodePool at its limits: once 10 pods run (spot 6 on three
// c-2x nodes), its cpu limit is lowered to what it uses, as an operator
// capping spot would. A scale-up to 14 then gives spot 3 more pods that
// Karpenter cannot launch a node for; the detector marks the pool out at
// once (after its grace, reason limits) and they run on on-demand. The
// limit is raised, and after the TTL new pods go to spot again; the
// fallback pods count on on-demand, which then holds 8 where its quota at 18
// is 6, so a scale-down to 15 removes 3 on-demand pods, the ones placed last
// (fallback pods), and leaves the split within quota.
func TestLimitsFallBackThenRecover(t *testing.T) {
	t.Parallel()
	const name, pool = "limits", "limits-spot"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	d := deployment(ns, name, "limits", 10, "900m", nil)
	running, _, until := fallBackAtTheCap(t, d, pool, pods)

	// Room on spot again; the pool stays out until the end of the outage.
	setCPULimit(t, pool, resource.MustParse("200"))
	if wait := time.Until(until.Add(3 * time.Second)); wait > 0 {
		t.Logf("waiting %s for the outage to end (%s)", round(wait), until.Format(time.RFC3339))
		time.Sleep(wait)
	}
	if seen := decided(t, running); toSpot(t, seen, 4) != 4 {
		t.Fatalf("the method gives spot %d of the next 4 pods after %v: the case expects 4", toSpot(t, seen, 4), seen)
	}
	before := uids(running)
	start := time.Now()
	scale(t, d, 18)
	running = waitRunning(t, ns, name, 18, 3*time.Minute)
	t.Logf("timings: 14 -> 18 after the outage, all Running %s after the scale-up", round(time.Since(start)))
	groups := nodeGroups(t, "limits", running)
	for _, p := range running {
		if before[p.UID] {
			continue
		}
		if groups[p.UID] != spot || p.Annotations[annotations.Group] != spot || p.Annotations[annotations.Fallback] != "" {
			t.Errorf("new pod %s after the outage: decided %s (fallback %q), runs on %s; want spot", p.Name,
				p.Annotations[annotations.Group], p.Annotations[annotations.Fallback], groups[p.UID])
		}
	}
	fallback := checkFallbackPods(t, "limits", running)

	// Scale-down: on-demand's pods above its quota go first, the newest
	// (fallback) ones.
	waitDeletionCosts(t, ns, name)
	const target = 15
	scale(t, d, target)
	var left []corev1.Pod
	framework.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d live pods", target), func() error {
		if left = livePods(t, ns, name); len(left) != target {
			return fmt.Errorf("%d live pods", len(left))
		}
		return nil
	})
	gone := uids(running)
	for _, p := range left {
		delete(gone, p.UID)
	}
	wasFallback := uids(fallback)
	for uid := range gone {
		if !wasFallback[uid] {
			t.Errorf("the scale-down 18 -> %d removed pod %s, not a fallback pod (fallback pods %v)", target, uid, names(fallback))
		}
	}
	counts := countByNode(t, "limits", left)
	if desc, ok := quota(t, counts); !ok {
		t.Errorf("after the scale-down 18 -> %d: %s, want within quota", target, desc)
	}
	t.Logf("scale-down 18 -> %d removed %d of the fallback pods %v; left %v", target, len(gone), names(fallback), counts)
}

// fallBackAtTheCap runs the first half of the limits cases: d (seed 004,
// 10 pods of 900m) runs 4/6, with spot 6 on three c-2x nodes of pool; the
// pool's cpu limit is lowered to what it uses, and a scale-up to 14 gives
// spot 3 more pods that Karpenter cannot launch a node for: the detector
// marks the pool out (reason limits) and they run on on-demand. It returns
// the 14 running pods, the fallback pods, and when the outage ends.
func fallBackAtTheCap(t *testing.T, d *appsv1.Deployment, pool string, pods *podLog) (running, fallback []corev1.Pod, until time.Time) {
	t.Helper()
	ns, name, caseName := d.Namespace, d.Name, d.Spec.Template.Spec.NodeSelector[caseLabel]
	create(t, d)
	running = waitRunning(t, ns, name, 10, 3*time.Minute)
	if c, want := countByNode(t, caseName, running), expected(t, 10); c[onDemand] != want[onDemand] || c[spot] != want[spot] {
		t.Fatalf("before the cap: counts by node %v, want %v", c, want)
	}
	// The NodePool's usage once it counts the three spot nodes (Karpenter
	// updates it every few seconds); kwok's node capacity is the NodeClaim's
	// requests, so three nodes of two 900m pods use cpu 5400m.
	var used resource.Quantity
	framework.WaitFor(t, time.Minute, "NodePool "+pool+" to count its nodes", func() error {
		var np karpv1.NodePool
		if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: pool}, &np); err != nil {
			return err
		}
		if n := ptr.Deref(np.Status.Nodes, 0); n != 3 {
			return fmt.Errorf("status.nodes %d, want 3", n)
		}
		used = np.Status.Resources[corev1.ResourceCPU]
		return nil
	})
	setCPULimit(t, pool, used)

	stuck := toSpot(t, decided(t, running), 4) // 3 of the 4 new pods are spot's
	start := time.Now()
	scale(t, d, 14)
	evs := eventsFor(t, ns, name, "CapacityUnavailable", 3*time.Minute)
	if len(evs) == 0 {
		t.Fatalf("no CapacityUnavailable Event on Deployment %s within 3m of the scale-up", name)
	}
	detected := time.Since(start)
	msg := evs[0].Message
	if !strings.Contains(msg, "NodePool "+pool) || !strings.Contains(msg, "(limits:") || evs[0].Type != corev1.EventTypeWarning {
		t.Errorf("CapacityUnavailable Event: %s %q, want a Warning naming NodePool %s and reason limits", evs[0].Type, msg, pool)
	}
	until = outUntil(t, msg)
	running = waitRunning(t, ns, name, 14, 3*time.Minute)
	allRunning := time.Since(start)
	if c := countByNode(t, caseName, running); c[spot] != 6 || c[onDemand] != 8 {
		t.Errorf("counts by node %v, want spot 6 (its nodes at the cap) and on-demand 8", c)
	}
	fallback = checkFallbackPods(t, caseName, running)
	if int64(len(fallback)) != stuck {
		t.Errorf("%d fallback pods %v, want the %d spot was to get", len(fallback), names(fallback), stuck)
	}
	if deleted := pods.Deleted(); len(deleted) != len(fallback) {
		t.Errorf("pods deleted %v: want one per fallback pod (%d)", deleted, len(fallback))
	}
	t.Logf("timings: 10 -> 14 at the cap: CapacityUnavailable %s after the scale-up, first fallback pod created %s after, all 14 Running %s after; Event: %s",
		round(detected), round(firstCreated(fallback).Sub(start)), round(allRunning), msg)
	return running, fallback, until
}

// decided counts pods by their decided group, in seed 004's group order.
func decided(t *testing.T, pods []corev1.Pod) []int64 {
	t.Helper()
	s, err := strategy.Parse(seed004)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]int64, len(s.Groups))
	for _, p := range pods {
		seen[slices.Index(s.Keys(), p.Annotations[annotations.Group])]++
	}
	return seen
}

// toSpot is how many of k more pods seed 004's method gives spot after seen.
func toSpot(t *testing.T, seen []int64, k int) int64 {
	t.Helper()
	s, m := method(t, seed004)
	seen = slices.Clone(seen)
	var n int64
	for range k {
		g := m.Next(seen, apportion.All)
		if s.Keys()[g] == spot {
			n++
		}
		seen[g]++
	}
	return n
}

// setCPULimit sets a NodePool's cpu limit.
func setCPULimit(t *testing.T, pool string, cpu resource.Quantity) {
	t.Helper()
	framework.WaitFor(t, 30*time.Second, "setting the cpu limit of "+pool, func() error {
		var np karpv1.NodePool
		if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: pool}, &np); err != nil {
			return err
		}
		np.Spec.Limits[corev1.ResourceCPU] = cpu
		return env.Kube.Update(t.Context(), &np)
	})
	t.Logf("NodePool %s: cpu limit %s", pool, cpu.String())
}

// (a, continued) A cpu limit that leaves less room than a node: the spot
// pool's limit (cpu 3) holds one c-2x node, so Karpenter launches no second
// one, yet the pool's usage stays below the limit (1.8 with kwok, whose node
// capacity is the NodeClaim's requests; 2 on a real cloud). The pool is not
// "at its limits", so the detector can only see it by the timeout: the pod
// that does not fit still ends up on on-demand, with the Event.
func TestCPULimitShortOfANode(t *testing.T) {
	t.Parallel()
	const name, spotFits = "cpulimit", 2
	ns := newNamespace(t)
	d := deployment(ns, name, "cpulimit", 0, "900m", nil)
	create(t, d)
	start := time.Now()
	scale(t, d, 6)
	want := expected(t, 6) // on-demand 3, spot 3
	evs := eventsFor(t, ns, name, "CapacityUnavailable", capacityTimeout+3*time.Minute)
	if len(evs) == 0 {
		t.Fatalf("no CapacityUnavailable Event on Deployment %s", name)
	}
	detected := time.Since(start)
	msg := evs[0].Message
	if !strings.Contains(msg, "NodePool cpulimit-spot") || !strings.Contains(msg, "(limits:") && !strings.Contains(msg, "(timeout:") {
		t.Errorf("CapacityUnavailable Event %q: want NodePool cpulimit-spot, reason limits or timeout", msg)
	}
	running := waitRunning(t, ns, name, 6, 3*time.Minute)
	allRunning := time.Since(start)
	if c := countByNode(t, name, running); c[spot] != spotFits || c[onDemand] != 6-spotFits {
		t.Errorf("counts by node %v, want spot %d (one node) and on-demand %d", c, spotFits, 6-spotFits)
	}
	if fb := checkFallbackPods(t, name, running); int64(len(fb)) != want[spot]-spotFits {
		t.Errorf("%d fallback pods, want %d", len(fb), want[spot]-spotFits)
	}
	var np karpv1.NodePool
	if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: "cpulimit-spot"}, &np); err != nil {
		t.Fatal(err)
	}
	used, limit := np.Status.Resources[corev1.ResourceCPU], np.Spec.Limits[corev1.ResourceCPU]
	t.Logf("timings: CapacityUnavailable %s after the scale-up, all 6 Running %s after; cpulimit-spot uses cpu %s of %s; Event: %s",
		round(detected), round(allRunning), used.String(), limit.String(), msg)
}

// (b) A spot NodePool that no instance type can serve — one names an
// instance type that does not exist, the other one whose spot offerings are
// gone from the instance types file (the nearest kwok comes to spot capacity
// running out) — gets no NodeClaim: after --capacity-timeout its pods are
// recreated and run on on-demand.
func TestUnsatisfiablePoolFallsBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ caseName, pool string }{
		{"nosuch", "nosuch-spot"},
		{"nospot", "nospot-spot"},
	} {
		t.Run(tc.caseName, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			d := deployment(ns, tc.caseName, tc.caseName, 0, "100m", nil)
			create(t, d)
			start := time.Now()
			scale(t, d, 6)
			want := expected(t, 6) // on-demand 3, spot 3
			evs := eventsFor(t, ns, tc.caseName, "CapacityUnavailable", capacityTimeout+3*time.Minute)
			if len(evs) == 0 {
				t.Fatalf("no CapacityUnavailable Event on Deployment %s", tc.caseName)
			}
			detected := time.Since(start)
			if msg := evs[0].Message; !strings.Contains(msg, "NodePool "+tc.pool) {
				t.Errorf("CapacityUnavailable Event %q does not name NodePool %s", msg, tc.pool)
			}
			running := waitRunning(t, ns, tc.caseName, 6, 3*time.Minute)
			allRunning := time.Since(start)
			if c := countByNode(t, tc.caseName, running); c[onDemand] != 6 {
				t.Errorf("counts by node %v, want all 6 on on-demand", c)
			}
			fallback := checkFallbackPods(t, tc.caseName, running)
			// Karpenter may have told already that the pool has no
			// instance types: then every pod is decided with spot out.
			if int64(len(fallback)) < want[spot] {
				t.Errorf("%d fallback pods, want at least spot's share %d", len(fallback), want[spot])
			}
			var claims karpv1.NodeClaimList
			if err := env.Kube.List(t.Context(), &claims, client.MatchingLabels{karpv1.NodePoolLabelKey: tc.pool}); err == nil && len(claims.Items) > 0 {
				t.Errorf("NodePool %s got %d NodeClaims; the case needs a pool Karpenter cannot launch from", tc.pool, len(claims.Items))
			}
			t.Logf("timings: CapacityUnavailable %s after the scale-up (--capacity-timeout %s), first fallback pod created %s after, all 6 Running %s after; Event: %s",
				round(detected), capacityTimeout, round(firstCreated(fallback).Sub(start)), round(allRunning), evs[0].Message)
		})
	}
}

// checkUntouched asserts a scale-up ran its course without the detector:
// no pod deleted, no CapacityUnavailable Event, every pod on the group it
// was decided for with no fallback, and the split exactly the strategy's.
// noEvent: also no CapacityUnavailable Event.
func checkUntouched(t *testing.T, ns, name, caseName string, pods *podLog, running []corev1.Pod, noEvent bool) {
	t.Helper()
	if deleted := pods.Deleted(); len(deleted) > 0 {
		t.Errorf("pods deleted during the scale-up: %v", deleted)
	}
	if noEvent {
		if evs := eventsFor(t, ns, name, "CapacityUnavailable", 5*time.Second); len(evs) > 0 {
			t.Errorf("CapacityUnavailable Event on a healthy launch: %q", evs[0].Message)
		}
	}
	if fb := checkFallbackPods(t, caseName, running); len(fb) > 0 {
		t.Errorf("fallback pods on a healthy launch: %v", names(fb))
	}
	want := expected(t, len(running))
	if got := countByNode(t, caseName, running); got[onDemand] != want[onDemand] || got[spot] != want[spot] {
		t.Errorf("counts by node %v, want exactly %v", got, want)
	}
}

// longestPending is the longest any pod waited for a node.
func longestPending(pods []corev1.Pod) time.Duration {
	var longest time.Duration
	for _, p := range pods {
		longest = max(longest, pendingFor(p))
	}
	return longest
}

// (c) No false positive: a scale-up whose NodeClaims take slowDelay to
// register (longer than the detector's 10 s grace, within the timeout)
// loses no pod, gets no Event, and ends exact.
func TestSlowLaunchIsNotAnOutage(t *testing.T) {
	t.Parallel()
	const name = "slow"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	d := deployment(ns, name, "slow", 2, "100m", nil)
	create(t, d)
	waitRunning(t, ns, name, 2, 3*time.Minute)
	start := time.Now()
	scale(t, d, 10)
	running := waitRunning(t, ns, name, 10, 3*time.Minute)
	elapsed := time.Since(start)
	checkUntouched(t, ns, name, "slow", pods, running, true)
	if pods.Created() != 10 {
		t.Errorf("%d pods were created for 10 replicas", pods.Created())
	}
	longest := longestPending(running)
	t.Logf("timings: 2 -> 10 all Running %s after the scale-up; longest a pod waited for a node %s (grace 10s, --capacity-timeout %s); NodeClaim launches of slow-spot %v",
		round(elapsed), round(longest), capacityTimeout, claimLaunches(t, "slow-spot"))
	if longest < 10*time.Second {
		t.Errorf("no pod waited longer than the detector's 10s grace (%s): the case did not test a slow launch", round(longest))
	}
}

// (c, continued) A pool whose launching NodeClaims bring it exactly to its
// limits — here capped by hand at what it uses, launching NodeClaims
// included (Karpenter counts them); on a real cloud also when Karpenter
// launches up to the limit, as it sizes nodes to fit — is "at its limits",
// so the detector may mark it out after its grace (the contract's rule,
// logged here, not asserted). But the pods those NodeClaims are for get
// their nodes: none of them may be deleted, and the split stays exact.
func TestCappedWhileLaunching(t *testing.T) {
	t.Parallel()
	const name, pool = "capped", "capped-spot"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	d := deployment(ns, name, "capped", 0, "100m", nil)
	create(t, d)
	start := time.Now()
	scale(t, d, 6)
	var used resource.Quantity
	framework.WaitFor(t, time.Minute, "a NodeClaim of "+pool+" counted in its usage", func() error {
		var np karpv1.NodePool
		if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: pool}, &np); err != nil {
			return err
		}
		if ptr.Deref(np.Status.Nodes, 0) == 0 {
			return fmt.Errorf("status.nodes 0")
		}
		used = np.Status.Resources[corev1.ResourceCPU]
		return nil
	})
	capped := time.Since(start)
	setCPULimit(t, pool, used)
	running := waitRunning(t, ns, name, 6, 3*time.Minute)
	elapsed := time.Since(start)
	evs := eventsFor(t, ns, name, "CapacityUnavailable", 5*time.Second)
	var msg string
	if len(evs) > 0 {
		msg = evs[0].Message
	}
	t.Logf("timings: capped %s after the scale-up, all 6 Running %s after; NodeClaim launches %v; deleted %v; Event %q",
		round(capped), round(elapsed), claimLaunches(t, pool), pods.Deleted(), msg)
	checkUntouched(t, ns, name, "capped", pods, running, false)
}

// (c, continued) A launch slower than --capacity-timeout, on a workload
// whose apportion.dev/capacity-timeout allows it, is left alone as well.
func TestLaunchWithinWorkloadTimeout(t *testing.T) {
	t.Parallel()
	const name = "slower"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	d := deployment(ns, name, "slower", 0, "100m", map[string]string{annotations.CapacityTimeout: "3m"})
	create(t, d)
	start := time.Now()
	scale(t, d, 6)
	running := waitRunning(t, ns, name, 6, 4*time.Minute)
	elapsed := time.Since(start)
	checkUntouched(t, ns, name, "slower", pods, running, true)
	longest := longestPending(running)
	t.Logf("timings: 0 -> 6 all Running %s after the scale-up; longest a pod waited for a node %s (--capacity-timeout %s, workload's 3m); NodeClaim launches of slower-spot %v",
		round(elapsed), round(longest), capacityTimeout, claimLaunches(t, "slower-spot"))
	if longest <= capacityTimeout {
		t.Errorf("no pod waited longer than --capacity-timeout (%s): the case did not test a launch beyond it", round(longest))
	}
}

// (d) Strays: pods admitted while the pod webhook is gone carry no decision;
// once bound they count in the group of their node, the later decisions
// record them ("strays") and compensate, and the split by node labels of
// every pod ends within quota. It takes the webhook away from the whole
// cluster, so it does not run in parallel (the parallel cases wait for it).
func TestStraysCountByTheirNode(t *testing.T) {
	const name = "strays"
	ns := newNamespace(t)
	d := deployment(ns, name, "strays", 4, "100m", nil)
	create(t, d)
	decided := uids(waitRunning(t, ns, name, 4, 3*time.Minute))
	rs := replicaSetOf(t, ns, name)

	var saved admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: "apportion"}, &saved); err != nil {
		t.Fatal(err)
	}
	restore := func(ctx context.Context) error {
		again := saved.DeepCopy()
		again.ObjectMeta = metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels, Annotations: saved.Annotations}
		if err := env.Kube.Create(ctx, again); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
	t.Cleanup(func() {
		if err := restore(context.Background()); err != nil {
			t.Errorf("registering the pod webhook again: %v", err)
		}
	})
	if err := env.Kube.Delete(t.Context(), &saved); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, 30*time.Second, "the API server to stop calling the pod webhook", func() error {
		if webhookGates(t, rs) {
			return fmt.Errorf("a dry-run pod is still gated")
		}
		return nil
	})
	start := time.Now()
	scale(t, d, 8)
	pods := waitRunning(t, ns, name, 8, 3*time.Minute)
	t.Logf("timings: 4 -> 8 without the webhook, all Running %s after the scale-up", round(time.Since(start)))
	var strays []corev1.Pod
	for _, p := range pods {
		if decided[p.UID] {
			continue
		}
		if decision.Decided(&p) || decision.HasGate(&p) {
			t.Fatalf("pod %s was admitted through the webhook after it was removed", p.Name)
		}
		strays = append(strays, p)
	}
	strayCounts := countByNode(t, "strays", strays)
	t.Logf("strays %v by their nodes: %v", names(strays), strayCounts)

	if err := restore(t.Context()); err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, 30*time.Second, "the API server to call the pod webhook again", func() error {
		if !webhookGates(t, rs) {
			return fmt.Errorf("a dry-run pod is not gated")
		}
		return nil
	})
	start = time.Now()
	scale(t, d, 24)
	pods = waitRunning(t, ns, name, 24, 4*time.Minute)
	t.Logf("timings: 8 -> 24 with the webhook back, all Running %s after the scale-up", round(time.Since(start)))

	s, _ := strategy.Parse(seed004)
	later := 0
	for _, p := range pods {
		if decided[p.UID] || slices.ContainsFunc(strays, func(sp corev1.Pod) bool { return sp.UID == p.UID }) {
			continue
		}
		later++
		r := record(t, p)
		got := map[string]int64{}
		for i, n := range r.Strays {
			if n > 0 {
				got[s.Keys()[i]] = n
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(strayCounts) {
			t.Errorf("pod %s: decision record strays %v (%s), want the strays by their nodes %v", p.Name, r.Strays, p.Annotations[annotations.Decision], strayCounts)
		}
	}
	if later != 16 {
		t.Errorf("%d pods decided after the webhook came back, want 16", later)
	}
	final := countByNode(t, "strays", pods)
	if msg, ok := quota(t, final); !ok {
		t.Errorf("every pod by its node: %s", msg)
	} else {
		t.Logf("every pod by its node (strays included): %s", msg)
	}
}

// replicaSetOf returns the Deployment's one ReplicaSet.
func replicaSetOf(t *testing.T, ns, name string) *appsv1.ReplicaSet {
	t.Helper()
	var list appsv1.ReplicaSetList
	if err := env.Kube.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("Deployment %s has %d ReplicaSets, want 1", name, len(list.Items))
	}
	return &list.Items[0]
}

// webhookGates creates a dry-run pod of the ReplicaSet and reports whether
// the admission chain gave it apportion's scheduling gate, i.e. whether the
// API server calls the pod webhook now. Dry runs reach the webhook (side
// effects NoneOnDryRun) and leave no pod behind.
func webhookGates(t *testing.T, rs *appsv1.ReplicaSet) bool {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: rs.Namespace, GenerateName: rs.Name + "-probe-",
			Labels: rs.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true),
			}},
		},
		Spec: *rs.Spec.Template.Spec.DeepCopy(),
	}
	if err := env.Kube.Create(t.Context(), pod, client.DryRunAll); err != nil {
		t.Fatalf("dry-run pod: %v", err)
	}
	return decision.HasGate(pod)
}
