//go:build e2e

package chart_test

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/test/framework"
)

// testFrozenLeader freezes the placement leader (SIGSTOP) mid-burst, as a
// hung process or a node cut off from the network would leave it: its pod
// stays an endpoint of the Service until the kubelet's readiness probe
// fails, and every admission the API server sends it meanwhile waits out
// the webhook timeout and fails open. The test measures those pods (admitted
// without a decision) and how long the frozen replica stayed an endpoint;
// the other replica takes the Lease and decides the rest, the split stays
// within quota, and once thawed (SIGCONT) the old leader steps down: the
// Lease stays with the other replica and the thawed one no longer leads.
func testFrozenLeader(t *testing.T) {
	const pods = 300
	ns := newNamespace(t, "frozen")
	gates := burstDeployments(t, ns, "burst")
	leader := leaderProcess(t)
	var other *framework.PodProcess
	for _, p := range env.kubelet.Processes() {
		if p.Name != leader.Name {
			other = p
		}
	}
	if other == nil {
		t.Fatal("no second replica")
	}
	waitFor(t, 30*time.Second, "both replicas ready endpoints", func() error {
		for _, p := range []*framework.PodProcess{leader, other} {
			if !isReadyEndpoint(t, p.IP) {
				return fmt.Errorf("%s is not a ready endpoint of Service %s", p.IP, release)
			}
		}
		return nil
	})
	holder := leaseHolder(t)

	start := time.Now()
	scale(t, ns, "burst", pods)
	waitFor(t, time.Minute, "20 pods of the burst admitted", func() error {
		if seen, _, _ := gates.Counts(); seen < 20 {
			return fmt.Errorf("%d pods", seen)
		}
		return nil
	})
	frozen, thaw := freeze(t, leader)
	seenAtFreeze, _, _ := gates.Counts()
	t.Logf("froze the leader %s (SIGSTOP) %s after the scale-up, %d pods admitted", leader.Name, frozen.Sub(start).Round(time.Millisecond), seenAtFreeze)
	// Nothing but the readiness probe takes it out: its pod is not deleted.
	dropped := endpointDrop(leader.IP, frozen)

	waitFor(t, 3*time.Minute, "every pod of the burst created and ungated", func() error {
		if seen, gated, _ := gates.Counts(); seen < pods || gated > 0 {
			return fmt.Errorf("%d pods seen, %d gated", seen, gated)
		}
		return nil
	})
	allPlaced := time.Since(frozen)
	drop := <-dropped
	if drop < 0 {
		t.Fatalf("the frozen replica %s was still a ready endpoint a minute after it froze: its readiness probe did not take it out", leader.IP)
	}
	var pod corev1.Pod
	if err := env.kube.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: leader.Name}, &pod); err != nil {
		t.Fatal(err)
	}
	if pod.DeletionTimestamp != nil || podIsReady(&pod) {
		t.Fatalf("the frozen replica's pod: deleted %v, Ready %v; want it kept and not Ready", pod.DeletionTimestamp != nil, podIsReady(&pod))
	}
	newHolder := leaseHolder(t)
	if newHolder == holder {
		t.Fatalf("the Lease is still held by the frozen replica (%s)", holder)
	}

	seen := gates.Pods()
	// The pods created while the frozen replica was still an endpoint: the
	// admissions that could have been sent to it.
	exposed := 0
	for _, g := range seen {
		if !g.FirstSeen.Before(frozen) && g.FirstSeen.Before(frozen.Add(drop)) {
			exposed++
		}
	}
	burst := classifyBurst(listPods(t, ns, "burst"), seen, nil)
	decided, released, failedOpen := len(burst.decided), len(burst.released), len(burst.failedOpen)
	for _, name := range burst.released {
		t.Errorf("pod %s was released without a decision", name)
	}
	share := 100 * float64(failedOpen) / pods
	p50, p99, maxWait := gates.WaitQuantiles()
	t.Logf("frozen leader: left the endpoints %s after it froze (readiness probe), %d pods created meanwhile; %d of %d pods (%.1f %%) admitted without a decision, %d released without one, %d decided; every pod placed %s after the freeze; gate wait p50 %.1fs, p99 %.1fs, max %.1fs",
		drop, exposed, failedOpen, pods, share, released, decided, allPlaced.Round(100*time.Millisecond), p50.Seconds(), p99.Seconds(), maxWait.Seconds())
	t.Logf("the API server failing open since the scale-up:\n%s", failingOpen(start))
	// The readiness probe takes the frozen replica out within a few
	// seconds (at most 2 periods and a timeout with the chart's timings,
	// 5 s; 10 s leaves room for a loaded machine; the former timings took
	// up to 20 s).
	if drop > 10*time.Second {
		t.Errorf("the frozen replica left the endpoints %s after it froze, want 10s or less", drop)
	}
	// The target is under 1 % of the burst, and most runs meet it (0 to 2
	// pods of 300), but it cannot be promised: the API server sends the
	// frozen replica every call it dials there until it leaves the
	// endpoints, and also, later, one call on each connection it had kept
	// open to it (its pool does not drop connections to a removed
	// endpoint; a timed-out one is closed). How many depends on the
	// burst's rate and the API server's pool, not on apportion. What must
	// hold: every pod admitted without a decision is one whose call timed
	// out there, and none failed open for another reason (an error of the
	// replica that runs, or no leader: the other replica holds pods at the
	// gate until it takes the Lease).
	reasons, _, _, err := failingOpenReasons(frozen)
	if err != nil {
		t.Fatal(err)
	}
	timedOut := reasons["context deadline exceeded"]
	if failedOpen > timedOut {
		t.Errorf("%d pods admitted without a decision, but only %d admission calls timed out on the frozen replica", failedOpen, timedOut)
	}
	if 100*failedOpen >= pods {
		t.Logf("%d of %d pods (%.1f %%) admitted without a decision: over the 1 %% target", failedOpen, pods, share)
	}
	checkSplit(t, ns, "burst", pods)

	// Thawed, the old leader finds the Lease taken and stops leading: the
	// manager exits on a lost election (its Deployment restarts it).
	thaw()
	waitFor(t, time.Minute, "the thawed replica no longer leading", func() error {
		select {
		case <-leader.Exited:
			return nil
		default:
		}
		leading, err := leads(leader)
		if err != nil {
			return err
		}
		if leading {
			return fmt.Errorf("%s still reports itself leader", leader.Name)
		}
		return nil
	})
	if h := leaseHolder(t); h != newHolder {
		t.Fatalf("the Lease moved from %s to %s after the thaw", newHolder, h)
	}
	if leading, err := leads(other); err != nil || !leading {
		t.Fatalf("the other replica %s does not report itself leader after the thaw (%v)", other.Name, err)
	}
	select {
	case <-leader.Exited:
		t.Logf("the thawed replica exited (status %d): %s", leader.ExitCode(), strings.TrimSpace(logTail(leader.LogName, 3)))
	default:
		t.Logf("the thawed replica runs on, not leading")
	}
	checkSplit(t, ns, "burst", pods)
	replaceIfExited(t, leader)
}

// replaceIfExited replaces the pod of p when p exited: the stand-in kubelet
// does not restart containers, and later steps want two replicas again.
func replaceIfExited(t *testing.T, p *framework.PodProcess) {
	t.Helper()
	select {
	case <-p.Exited:
		var pod corev1.Pod
		if err := env.kube.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: p.Name}, &pod); err == nil {
			if err := env.kube.Delete(t.Context(), &pod); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 2*time.Minute, "two replicas running", func() error {
			if n := len(env.kubelet.Processes()); n != 2 {
				return fmt.Errorf("%d running", n)
			}
			return nil
		})
	default:
	}
}

// checkSplit waits until n pods of app run and checks their split by node
// label against seed 004's quota.
func checkSplit(t *testing.T, ns, app string, n int) {
	t.Helper()
	pods := waitRunning(t, ns, app, n, 5*time.Minute)
	counts := countByNode(t, pods, capacity)
	s, err := strategy.Parse(seed004)
	if err != nil {
		t.Fatal(err)
	}
	m, err := plan.Method(s)
	if err != nil {
		t.Fatal(err)
	}
	ordered := []int64{int64(counts["on-demand"]), int64(counts["spot"])}
	if !m.WithinQuota(ordered, apportion.All) || int(ordered[0]+ordered[1]) != n {
		t.Fatalf("split of %d pods by node label %s: %v, not within quota", n, capacity, counts)
	}
	t.Logf("split of %d pods by node label %s: %v, within quota", n, capacity, counts)
}

func isReadyEndpoint(t *testing.T, ip string) bool {
	var list discoveryv1.EndpointSliceList
	if err := env.kube.List(t.Context(), &list, client.InNamespace(namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: release}); err != nil {
		return false
	}
	return readyEndpoint(list.Items, ip)
}

// freeze stops p (SIGSTOP) and returns when, with the thaw (SIGCONT, sent
// once), which the test's cleanup also runs.
func freeze(t *testing.T, p *framework.PodProcess) (time.Time, func()) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	var once sync.Once
	thaw := func() { once.Do(func() { _ = p.Signal(syscall.SIGCONT) }) }
	t.Cleanup(thaw)
	return at, thaw
}

func leaseHolder(t *testing.T) string {
	t.Helper()
	var lease coordinationv1.Lease
	if err := env.kube.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: release}, &lease); err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// leads reports whether p's metrics say it holds the placement Lease; an
// error when they do not answer.
func leads(p *framework.PodProcess) (bool, error) {
	body, err := framework.HTTPGet(env.c, "http://"+net.JoinHostPort(p.IP, "8080")+"/metrics")
	if err != nil {
		return false, fmt.Errorf("%s: %w", p.Name, err)
	}
	return strings.Contains(body, `leader_election_master_status{name="`+release+`"} 1`), nil
}

func podIsReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
