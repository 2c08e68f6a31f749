package framework

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/test/cluster"
)

// GateTracker watches the pods of one namespace and notes, per pod, when it
// was first seen, whether it was held by apportion's gate then, and when the
// gate was first seen gone: the gate wait as a user would measure it, to
// the watch's latency (pods' creation timestamps have one-second
// resolution; the watch is finer).
type GateTracker struct {
	mu   sync.Mutex
	pods map[types.UID]*GatedPod
}

// GatedPod is what a GateTracker saw of one pod.
type GatedPod struct {
	Name      string
	FirstSeen time.Time
	Gated     bool      // held by the placement gate when first seen
	Ungated   time.Time // zero while the gate is on (or when it never was)
}

// Wait is how long the pod was seen held by the gate; 0 for a pod never
// gated or still gated.
func (p GatedPod) Wait() time.Duration {
	if !p.Gated || p.Ungated.IsZero() {
		return 0
	}
	return p.Ungated.Sub(p.FirstSeen)
}

// TrackGates starts a GateTracker on namespace ns of cluster c; it stops
// when ctx ends.
func TrackGates(ctx context.Context, c *cluster.Cluster, ns string) (*GateTracker, error) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, fmt.Errorf("building a clientset: %w", err)
	}
	g := &GateTracker{pods: map[types.UID]*GatedPod{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	pods := factory.Core().V1().Pods().Informer()
	if _, err := pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { g.observe(obj) },
		UpdateFunc: func(_, obj any) { g.observe(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("syncing the %v informer", typ)
		}
	}
	return g, nil
}

func (g *GateTracker) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	gated := decision.HasGate(pod)
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.pods[pod.UID]
	if p == nil {
		p = &GatedPod{Name: pod.Name, FirstSeen: now, Gated: gated}
		g.pods[pod.UID] = p
	}
	if p.Gated && !gated && p.Ungated.IsZero() {
		p.Ungated = now
	}
}

// Pods returns what was seen of every pod so far, by name.
func (g *GateTracker) Pods() map[string]GatedPod {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]GatedPod, len(g.pods))
	for _, p := range g.pods {
		out[p.Name] = *p
	}
	return out
}

// Counts returns how many pods were seen, how many are still gated, and how
// many were never gated.
func (g *GateTracker) Counts() (seen, gated, neverGated int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.pods {
		seen++
		switch {
		case !p.Gated:
			neverGated++
		case p.Ungated.IsZero():
			gated++
		}
	}
	return seen, gated, neverGated
}

// WaitQuantiles returns the p50, p99 and max gate wait of the pods that were
// gated and are released.
func (g *GateTracker) WaitQuantiles() (p50, p99, maxWait time.Duration) {
	var waits []time.Duration
	for _, p := range g.Pods() {
		if w := p.Wait(); w > 0 {
			waits = append(waits, w)
		}
	}
	if len(waits) == 0 {
		return 0, 0, 0
	}
	sort.Slice(waits, func(a, b int) bool { return waits[a] < waits[b] })
	at := func(q float64) time.Duration { return waits[min(len(waits)-1, int(q*float64(len(waits))))] }
	return at(0.5), at(0.99), waits[len(waits)-1]
}

// ReportLongestWait logs the longest gate wait as a ratio of a target. These
// machines are shared and noisy, so a timing is reported, never asserted: a
// wait over the target is logged as "TARGET MISSED" for the run's reader;
// what the test asserts is that no pod left the gate without a decision.
func ReportLongestWait(t testing.TB, maxWait, target time.Duration, what string) {
	t.Helper()
	ratio := maxWait.Seconds() / target.Seconds()
	if maxWait > target {
		t.Logf("TARGET MISSED: the longest gate wait was %.1fs, %.2fx %s (%s)", maxWait.Seconds(), ratio, what, target)
		return
	}
	t.Logf("the longest gate wait was %.1fs, %.2fx %s (%s)", maxWait.Seconds(), ratio, what, target)
}
