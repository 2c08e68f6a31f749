//go:build e2e

package chart_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/test/framework"
)

// burstDeployments creates the Deployments named, of seed 004 at 0
// replicas, and returns a tracker of their namespace's gates. Their image is
// on a host the chart's registry policy denies (loopback): its inspection
// fails at once and is cached, on the replica that does not lead too,
// instead of waiting out a registry this machine cannot reach; the tests
// time a takeover or a roll, not the registry.
func burstDeployments(t *testing.T, ns string, names ...string) *framework.GateTracker {
	t.Helper()
	for _, name := range names {
		d := deployment(ns, name, 0, map[string]string{annotations.Strategy: seed004})
		d.Spec.Template.Spec.Containers[0].Image = "localhost:5000/apportion-e2e/app:1"
		create(t, d)
	}
	gates, err := framework.TrackGates(t.Context(), env.c, ns)
	if err != nil {
		t.Fatal(err)
	}
	return gates
}

// testForceDeletedLeader loses the placement leader as a node failure would,
// mid-burst: its process is SIGKILLed and its pod force-deleted (grace
// period 0), so it neither drains nor releases the Lease. The other replica
// takes the Lease once it expires and decides the pods left gated: no pod is
// released by the gate janitor; the longest gate wait is reported against the
// lease duration plus 5 s. Admission calls in flight to the lost replica
// fail open (failure policy Ignore); those pods are counted and reported.
func testForceDeletedLeader(t *testing.T) {
	const pods = 200
	ns := newNamespace(t, "forcedelete")
	gates := burstDeployments(t, ns, "burst")
	leader := leaderProcess(t)
	start := time.Now()
	scale(t, ns, "burst", pods)
	waitFor(t, time.Minute, "20 pods of the burst admitted", func() error {
		if seen, _, _ := gates.Counts(); seen < 20 {
			return fmt.Errorf("%d pods", seen)
		}
		return nil
	})
	if err := leader.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := env.kube.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: leader.Name}, &pod); err != nil {
		t.Fatal(err)
	}
	if err := env.kube.Delete(t.Context(), &pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("force-deleting the leader's pod: %v", err)
	}
	lost := time.Now()
	t.Logf("SIGKILLed the leader and force-deleted its pod %s %s after the scale-up", leader.Name, lost.Sub(start).Round(time.Millisecond))

	waitFor(t, 3*time.Minute, "every pod of the burst created and ungated", func() error {
		if seen, gated, _ := gates.Counts(); seen < pods || gated > 0 {
			return fmt.Errorf("%d pods seen, %d gated", seen, gated)
		}
		return nil
	})
	var lease coordinationv1.Lease
	if err := env.kube.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: release}, &lease); err != nil {
		t.Fatal(err)
	}
	duration := time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	seen := gates.Pods()
	burst := classifyBurst(listPods(t, ns, "burst"), seen, nil)
	decided, released, failedOpen := len(burst.decided), len(burst.released), len(burst.failedOpen)
	for _, name := range burst.released {
		t.Errorf("pod %s was released without a decision", name)
	}
	p50, p99, maxWait := gates.WaitQuantiles()
	t.Logf("lease %s: taken over %.1fs after the loss; %d pods decided, %d released without a decision, %d admitted without the gate (calls to the lost replica failed open); gate wait p50 %.1fs, p99 %.1fs, max %.1fs",
		duration, lease.Spec.AcquireTime.Sub(lost).Seconds(), decided, released, failedOpen, p50.Seconds(), p99.Seconds(), maxWait.Seconds())
	if failedOpen > 0 {
		t.Logf("the API server failing open since the scale-up:\n%s", failingOpen(start))
	}
	framework.ReportLongestWait(t, maxWait, duration+5*time.Second, "the lease duration plus 5s")
}
