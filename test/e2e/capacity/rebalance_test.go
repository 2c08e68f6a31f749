//go:build e2e

package capacity_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/test/framework"
)

// (a, with rebalance) The limits case on a workload annotated
// apportion.dev/rebalance: "true": once the spot pool has room again and its
// outage has ended, the fallback pods are evicted one at a time, their
// replacements are placed on spot, and the split is seed 004's at 14
// replicas by node labels, with no pod left on fallback. Only the fallback
// pods are evicted.
func TestRebalanceAfterOutage(t *testing.T) {
	t.Parallel()
	const name, pool = "rebalance", "rebalance-spot"
	ns := newNamespace(t)
	pods := watchPods(t, ns)
	d := deployment(ns, name, "rebalance", 10, "900m", map[string]string{annotations.Rebalance: "true"})
	running, fallback, until := fallBackAtTheCap(t, d, pool, pods)
	deletedBefore := map[string]bool{}
	for _, n := range pods.Deleted() {
		deletedBefore[n] = true
	}

	setCPULimit(t, pool, resource.MustParse("200"))
	start := time.Now()
	want := expected(t, 14)
	var final []corev1.Pod
	framework.WaitFor(t, 5*time.Minute, "14 Running pods in seed 004's split, none on fallback", func() error {
		live := livePods(t, ns, name)
		if len(live) != 14 {
			return fmt.Errorf("%d live pods", len(live))
		}
		var onFallback []string
		for _, p := range live {
			if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
				return fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
			}
			if p.Annotations[annotations.Fallback] != "" {
				onFallback = append(onFallback, p.Name)
			}
		}
		if len(onFallback) > 0 {
			return fmt.Errorf("still on fallback: %v", onFallback)
		}
		if c := countByNode(t, "rebalance", live); c[spot] != want[spot] || c[onDemand] != want[onDemand] {
			return fmt.Errorf("counts by node %v, want %v", c, want)
		}
		final = live
		return nil
	})
	took := time.Since(start)

	// Only the fallback pods were evicted, each once.
	var evicted []string
	for _, n := range pods.Deleted() {
		if !deletedBefore[n] {
			evicted = append(evicted, n)
		}
	}
	fallbackNames := names(fallback)
	if len(evicted) != len(fallback) {
		t.Errorf("pods deleted after the limit was raised: %v; want the fallback pods %v", evicted, fallbackNames)
	}
	for _, n := range evicted {
		if !slices.Contains(fallbackNames, n) {
			t.Errorf("pod %s was evicted but was not a fallback pod (%v)", n, fallbackNames)
		}
	}
	framework.WaitFor(t, 30*time.Second, "a Rebalanced Event per fallback pod", func() error {
		evs := eventsFor(t, ns, name, "Rebalanced", 0)
		if len(evs) != len(fallback) {
			return fmt.Errorf("%d Rebalanced Events, want %d", len(evs), len(fallback))
		}
		for _, e := range evs {
			if e.Type != corev1.EventTypeNormal || !strings.Contains(e.Message, spot) {
				return fmt.Errorf("Rebalanced Event %s %q: want Normal, naming %s", e.Type, e.Message, spot)
			}
		}
		return nil
	})
	for _, p := range final {
		if _, old := uids(running)[p.UID]; !old && p.Annotations[annotations.Group] != spot {
			t.Errorf("replacement %s decided %s; want spot", p.Name, p.Annotations[annotations.Group])
		}
	}
	t.Logf("timings: limit raised, outage until %s; the %d fallback pods replaced and the split %v reached %s after the raise (%s after the outage's end)",
		until.Format(time.RFC3339), len(fallback), countByNode(t, "rebalance", final), round(took), round(time.Since(until)))
}
