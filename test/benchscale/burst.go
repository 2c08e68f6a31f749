package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/test/framework"
)

// The strategies the workloads take in turn: the AWS sample webhook's
// capacity spread, an even split over the architectures, and an uneven one
// over three of the zones kwok's instance types are offered in.
var strategies = []string{
	"karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3",
	"kubernetes.io/arch=amd64,weight=1:kubernetes.io/arch=arm64,weight=1",
	"topology.kubernetes.io/zone=test-zone-a,weight=2:topology.kubernetes.io/zone=test-zone-b,weight=1:topology.kubernetes.io/zone=test-zone-c,weight=1",
}

// workload is one Deployment of the burst.
type workload struct {
	name     string
	strategy string
}

func workloads(n int) []workload {
	out := make([]workload, n)
	for i := range out {
		out[i] = workload{name: fmt.Sprintf("w-%03d", i), strategy: strategies[i%len(strategies)]}
	}
	return out
}

// deployment is w at zero replicas, of the bench's pods.
func deployment(ns, image string, w workload) *appsv1.Deployment {
	d := framework.Deployment(ns, w.name, 0, map[string]string{annotations.Strategy: w.strategy}, podSpec(image))
	d.Spec.Template.Labels[benchLabel] = "true"
	return d
}

// podSpec is the bench's pod: tiny requests, so that a node holds as many
// pods as kwok's instance types allow.
func podSpec(image string) corev1.PodSpec {
	spec := framework.AppPodSpec(image)
	spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
	}
	return spec
}

// groupLabel tells apart the Deployments of one workload in the pinned
// burst.
const groupLabel = "bench.apportion.dev/group"

// pinnedDeployments are w as the same pods without apportion, placed by
// hand: one Deployment per group of its strategy, with the group's labels
// as nodeSelector and the group's count of the quota at replicas, all
// labelled app=w.name. The control plane's time for them is what the
// placement itself costs, apportion aside.
func pinnedDeployments(ns, image string, w workload, replicas int, gated bool) ([]*appsv1.Deployment, error) {
	s, err := strategy.Parse(w.strategy)
	if err != nil {
		return nil, err
	}
	m, err := plan.Method(s)
	if err != nil {
		return nil, err
	}
	counts := m.CountsAt(int64(replicas), apportion.All)
	var out []*appsv1.Deployment
	for g, group := range s.Groups {
		d := deployment(ns, image, w)
		delete(d.Annotations, annotations.Strategy)
		d.Name = fmt.Sprintf("%s-g%d", w.name, g)
		d.Spec.Selector.MatchLabels[groupLabel] = strconv.Itoa(g)
		d.Spec.Template.Labels[groupLabel] = strconv.Itoa(g)
		d.Spec.Template.Spec.NodeSelector = map[string]string{}
		for _, l := range group.Labels {
			d.Spec.Template.Spec.NodeSelector[l.Key] = l.Value
		}
		d.Spec.Replicas = ptr.To(int32(counts[g]))
		if gated {
			d.Spec.Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: holdGate}}
		}
		out = append(out, d)
	}
	return out, nil
}

// The three bursts: the pods anywhere, the same split placed by hand, and
// placed by apportion.
const (
	modeWithout = "without"
	modePinned  = "pinned"
	modeWith    = "with"
)

// burstResult is what one burst measured, from the bench's pod watch.
type burstResult struct {
	Apportion bool `json:"apportion"`
	Pods      int  `json:"pods"`
	// Reached is "Running" when every pod ran, "scheduled" when every pod
	// was bound but some never ran before the run timeout, else "".
	Reached string `json:"reached"`
	// Seconds from the scale-up to the last pod's step.
	ToRunning   float64 `json:"toRunningSeconds,omitempty"`
	ToScheduled float64 `json:"toScheduledSeconds,omitempty"`
	ToDecided   float64 `json:"toDecidedSeconds,omitempty"`
	// Decided pods per second, from the first pod created to the last
	// decision.
	DecisionsPerSecond float64 `json:"decisionsPerSecond,omitempty"`
	Decided            int     `json:"decided"`
	Gated              int     `json:"gated"`
	// Ungated is pods never seen gated and not decided: admitted without a
	// decision (the webhook skipped them or failed open).
	Ungated int `json:"admittedWithoutDecision"`
	// MaxGateWait is the longest first-seen-to-decision of a pod;
	// MaxCreateToScheduled the longest creation-to-PodScheduled by the API
	// server's timestamps.
	MaxGateWait          float64 `json:"maxGateWaitSeconds,omitempty"`
	MaxCreateToScheduled float64 `json:"maxCreateToScheduledSeconds"`
	Splits               []split `json:"splits"`
	// CPU is the CPU seconds each of the cluster's processes used from
	// the scale-up until the burst ended.
	CPU      map[string]float64 `json:"cpuSeconds,omitempty"`
	OffQuota int                `json:"workloadsOffQuota"`
}

// burst runs one burst in its own namespace: the Deployments created at
// zero, then all scaled at once, until every pod runs or the run timeout
// passes. ns is left with its pods for the caller to measure and free.
func (b *bench) burst(ctx context.Context, ns, mode string, started func()) (*burstResult, error) {
	labels := map[string]string{}
	if mode != modeWith {
		labels[framework.IgnoreLabel] = "true"
	}
	if err := b.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	ws := workloads(b.o.workloads)
	var deployments []*appsv1.Deployment
	for _, w := range ws {
		if mode != modePinned {
			deployments = append(deployments, deployment(ns, b.image, w))
			continue
		}
		ds, err := pinnedDeployments(ns, b.image, w, b.o.replicas, b.o.pinnedGated)
		if err != nil {
			return nil, fmt.Errorf("workload %s: %w", w.name, err)
		}
		if b.o.pinnedDecided {
			// Pinned by the decision's node affinity, as apportion's pods.
			for _, d := range ds {
				d.Spec.Template.Spec.NodeSelector = nil
			}
		}
		deployments = append(deployments, ds...)
	}
	// Created at zero, then scaled all at once.
	replicas := map[string]int32{}
	for _, d := range deployments {
		replicas[d.Name] = *d.Spec.Replicas
		if mode != modePinned {
			replicas[d.Name] = int32(b.o.replicas)
		}
		d.Spec.Replicas = ptr.To(int32(0))
	}
	err := forEach(ctx, deployments, func(ctx context.Context, d *appsv1.Deployment) error {
		return b.kube.Create(ctx, d)
	})
	if err != nil {
		return nil, fmt.Errorf("creating the Deployments: %w", err)
	}
	want := b.o.workloads * b.o.replicas
	if mode == modePinned && b.o.pinnedGated {
		var d *decider
		if b.o.pinnedDecided {
			if d, err = newDecider(ctx, b.kube, ws, podSpec(b.image), imageArchitectures); err != nil {
				return nil, err
			}
		}
		rel := newReleaser(b.kube, d)
		relCtx, stop := context.WithCancel(ctx)
		rel.start(relCtx)
		hook := rel.observe
		b.watch.hook.Store(&hook)
		defer func() {
			b.watch.hook.Store(nil)
			stop()
			say("%s: %s", ns, rel.summary())
		}()
	}
	say("%s: scaling %d Deployments from 0 (%d pods)", ns, len(deployments), want)
	t0 := time.Now()
	cpu0 := cpuTimes(b.c.PIDs())
	err = forEach(ctx, deployments, func(ctx context.Context, d *appsv1.Deployment) error {
		scale := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas[d.Name]))
		return b.kube.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: d.Name}}, scale)
	})
	if err != nil {
		return nil, fmt.Errorf("scaling the Deployments: %w", err)
	}
	if started != nil {
		started()
	}
	b.waitBurst(ctx, ns, want, t0)
	cpu := cpuSince(cpu0, cpuTimes(b.c.PIDs()))
	res := measureBurst(b.watch.records(ns), want, t0)
	res.CPU = cpu
	res.Apportion = mode == modeWith
	nodes, err := b.nodeLabels(ctx)
	if err != nil {
		return res, err
	}
	res.Splits = checkSplits(ws, b.watch.records(ns), nodes)
	for _, s := range res.Splits {
		if !s.Within {
			res.OffQuota++
		}
	}
	return res, nil
}

// waitBurst waits until want pods of ns run, or the run timeout passes,
// with a progress line every 10 s.
func (b *bench) waitBurst(ctx context.Context, ns string, want int, t0 time.Time) {
	deadline := t0.Add(b.o.runTimeout)
	lastSay := t0
	for {
		p := b.watch.progress(ns)
		if p.pods == want && p.running == want {
			return
		}
		if time.Since(lastSay) >= 10*time.Second {
			say("%s after %s: %d pods, %d decided, %d unschedulable, %d bound, %d Running", ns, time.Since(t0).Round(time.Second), p.pods, p.decided, p.marked, p.bound, p.running)
			lastSay = time.Now()
		}
		if time.Now().After(deadline) {
			say("%s: run timeout %s: %d pods, %d decided, %d bound, %d Running", ns, b.o.runTimeout, p.pods, p.decided, p.bound, p.running)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// measureBurst turns the pod records into the burst's timings.
func measureBurst(recs []podRecord, want int, t0 time.Time) *burstResult {
	res := &burstResult{Pods: len(recs)}
	var firstSeen time.Time
	var decided, bound, running step
	for _, r := range recs {
		if firstSeen.IsZero() || r.seen.Before(firstSeen) {
			firstSeen = r.seen
		}
		if r.gated {
			res.Gated++
		}
		if decided.add(r.decided) {
			res.MaxGateWait = max(res.MaxGateWait, r.decided.Sub(r.seen).Seconds())
		} else if !r.gated {
			res.Ungated++
		}
		bound.add(r.bound)
		running.add(r.running)
		if !r.scheduledAt.IsZero() {
			res.MaxCreateToScheduled = max(res.MaxCreateToScheduled, r.scheduledAt.Sub(r.created).Seconds())
		}
	}
	res.Decided = decided.n
	complete := len(recs) == want
	switch {
	case complete && running.n == want:
		res.Reached = "Running"
		res.ToRunning = running.last.Sub(t0).Seconds()
		res.ToScheduled = bound.last.Sub(t0).Seconds()
	case complete && bound.n == want:
		res.Reached = "scheduled"
		res.ToScheduled = bound.last.Sub(t0).Seconds()
	}
	if decided.n == want {
		res.ToDecided = decided.last.Sub(t0).Seconds()
	}
	if d := decided.last.Sub(firstSeen).Seconds(); decided.n > 0 && d > 0 {
		res.DecisionsPerSecond = float64(decided.n) / d
	}
	return res
}

// step counts the pods that reached a step and keeps when the last did.
type step struct {
	n    int
	last time.Time
}

// add counts t unless it is zero (not reached) and reports whether it did.
func (s *step) add(t time.Time) bool {
	if t.IsZero() {
		return false
	}
	s.n++
	if t.After(s.last) {
		s.last = t
	}
	return true
}

// nodeLabels are the labels of every node, by name.
func (b *bench) nodeLabels(ctx context.Context) (map[string]map[string]string, error) {
	var nodes corev1.NodeList
	if err := b.kube.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	out := make(map[string]map[string]string, len(nodes.Items))
	for _, n := range nodes.Items {
		out[n.Name] = n.Labels
	}
	return out, nil
}

// free removes the burst's workloads and pods, then every NodeClaim, and
// waits for the nodes to go: the next burst starts with no spare capacity.
// The pods go in one DeleteCollection with no grace period, after their
// owners, instead of one DELETE each from the ReplicaSet controller.
func (b *bench) free(ctx context.Context, ns string) error {
	t0 := time.Now()
	inNS := []client.DeleteAllOfOption{client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationBackground)}
	for _, obj := range []client.Object{&appsv1.Deployment{}, &appsv1.ReplicaSet{}} {
		if err := b.kube.DeleteAllOf(ctx, obj, inNS...); err != nil {
			return fmt.Errorf("deleting the %T of %s: %w", obj, ns, err)
		}
	}
	if err := b.deletePods(ctx, ns); err != nil {
		return err
	}
	if err := b.kube.DeleteAllOf(ctx, &karpv1.NodeClaim{}); err != nil {
		return fmt.Errorf("deleting the NodeClaims: %w", err)
	}
	err := waitUntil(ctx, 5*time.Minute, func() (bool, error) {
		var nodes corev1.NodeList
		err := b.kube.List(ctx, &nodes)
		return err == nil && len(nodes.Items) == 0, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the nodes to go: %w", err)
	}
	say("%s: freed the pods and the nodes in %s", ns, time.Since(t0).Round(time.Second))
	return nil
}

// deletePods deletes every pod of ns with no grace period, one
// DeleteCollection per workload (all of ns at once takes the API server
// longer than its request timeout), and waits for them to go; a call that
// failed is made again.
func (b *bench) deletePods(ctx context.Context, ns string) error {
	var last error
	for range 5 {
		err := forEach(ctx, workloads(b.o.workloads), func(ctx context.Context, w workload) error {
			return b.kube.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels{"app": w.name}, client.GracePeriodSeconds(0))
		})
		if err != nil {
			say("%s: deleting the pods: %v", ns, err)
		}
		if last = waitUntil(ctx, 2*time.Minute, func() (bool, error) { return b.watch.live(ns) == 0, nil }); last == nil {
			return nil
		}
		say("%s: %d pods left, deleting again", ns, b.watch.live(ns))
	}
	return fmt.Errorf("waiting for the pods of %s to go: %w", ns, last)
}

// waitUntil polls done every 500 ms for up to timeout.
func waitUntil(ctx context.Context, timeout time.Duration, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := done()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// forEach calls fn for every item, 16 at a time, and returns the errors.
func forEach[T any](ctx context.Context, items []T, fn func(context.Context, T) error) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 16)
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, it); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
