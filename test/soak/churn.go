package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/test/framework"
)

// frozenMargin extends a frozen moment past the thaw: the thawed replica
// finds its Lease taken once its renew deadline (10 s) has passed and
// exits, still an endpoint for a moment (admissions sent there fail open),
// and calls sent to it while frozen time out up to the webhook's timeout
// (2 s) after it was taken out of the endpoints.
const frozenMargin = 30 * time.Second

// eventKind is one kind of churn and its average period: each runs on its
// own schedule, the first time at a random point of its first period, then
// every 0.75 to 1.25 periods. Exclusive kinds (the ones that hit
// apportion's replicas) wait for each other.
type eventKind struct {
	name      string
	period    time.Duration
	exclusive bool
	run       func(c *churn, ctx context.Context, rng *rand.Rand) (string, error)
}

var eventKinds = []eventKind{
	{"rollout", 15 * time.Second, false, (*churn).rollout},
	{"scale", 15 * time.Second, false, (*churn).scale},
	{"job", 20 * time.Second, false, (*churn).job},
	{"placement-policy", 100 * time.Second, false, (*churn).placementPolicy},
	{"cluster-policy", 150 * time.Second, false, (*churn).clusterPolicy},
	{"spot-interruption", 150 * time.Second, false, (*churn).spotInterruption},
	{"nodepool-limits", 240 * time.Second, false, (*churn).nodePoolLimits},
	{"leader-kill", 270 * time.Second, true, (*churn).leaderKill},
	{"leader-freeze", 300 * time.Second, true, (*churn).leaderFreeze},
	{"helm-upgrade", 330 * time.Second, true, (*churn).helmUpgrade},
}

// eventRecord is one churn event, as done.
type eventRecord struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Detail string    `json:"detail"`
	Error  string    `json:"error,omitempty"`
}

// window is a frozen moment: from the SIGSTOP to frozenMargin after the
// SIGCONT (To is zero while frozen).
type window struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// churn runs the events and keeps what the sampler needs of them.
type churn struct {
	e       *env
	m       *model
	seed    int64
	disrupt chan struct{} // held by the exclusive kinds

	mu        sync.Mutex
	events    []eventRecord
	frozen    []window
	frozenPod string
	rollouts  int
	upgrades  int
}

func newChurn(e *env, m *model, seed int64) *churn {
	return &churn{e: e, m: m, seed: seed, disrupt: make(chan struct{}, 1)}
}

// start runs every kind until ctx ends, and restarts the chart's pods
// whose process exited (the stand-in kubelet does not restart
// containers); the returned channel closes once all have returned.
func (c *churn) start(ctx context.Context) <-chan struct{} {
	var wg sync.WaitGroup
	for _, k := range eventKinds {
		wg.Add(1)
		go func() { defer wg.Done(); c.loop(ctx, k) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); c.restartExited(ctx) }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

func (c *churn) loop(ctx context.Context, k eventKind) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(k.name))
	rng := rand.New(rand.NewPCG(uint64(c.seed), h.Sum64())) //nolint:gosec // a replayable schedule, not a secret
	wait := time.Duration(float64(k.period) * (0.2 + 0.8*rng.Float64()))
	for {
		if sleep(ctx, wait) != nil {
			return
		}
		wait = time.Duration(float64(k.period) * (0.75 + 0.5*rng.Float64()))
		if k.exclusive {
			select {
			case c.disrupt <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		at := time.Now()
		detail, err := k.run(c, ctx, rng)
		if k.exclusive {
			<-c.disrupt
		}
		if ctx.Err() != nil && err != nil {
			return
		}
		rec := eventRecord{At: at, Kind: k.name, Detail: detail}
		if err != nil {
			rec.Error = err.Error()
			say("%s: %s: %v", k.name, detail, err)
		} else if k.exclusive || k.period >= time.Minute {
			say("%s: %s", k.name, detail)
		}
		c.mu.Lock()
		c.events = append(c.events, rec)
		c.mu.Unlock()
	}
}

// eventsBetween returns the events that started in [from, to).
func (c *churn) eventsBetween(from, to time.Time) []eventRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []eventRecord
	for _, ev := range c.events {
		if !ev.At.Before(from) && ev.At.Before(to) {
			out = append(out, ev)
		}
	}
	return out
}

// isFrozen reports whether t falls in a frozen moment.
func (c *churn) isFrozen(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return frozenAt(c.frozen, t)
}

func frozenAt(ws []window, t time.Time) bool {
	for _, w := range ws {
		if !t.Before(w.From) && (w.To.IsZero() || t.Before(w.To)) {
			return true
		}
	}
	return false
}

// overlapsFrozen reports whether [from, to) meets a frozen moment.
func (c *churn) overlapsFrozen(from, to time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.frozen {
		if w.From.Before(to) && (w.To.IsZero() || w.To.After(from)) {
			return true
		}
	}
	return false
}

// pick returns a random workload that ok accepts.
func (c *churn) pick(rng *rand.Rand, ok func(*workload) bool) *workload {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	var candidates []*workload
	for _, w := range c.m.workloads {
		if ok(w) {
			candidates = append(candidates, w)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	return candidates[rng.IntN(len(candidates))]
}

// patch sends a JSON merge patch to w's object.
func (c *churn) patch(ctx context.Context, w *workload, body string) error {
	var obj client.Object = &appsv1.Deployment{}
	if w.kind == kindStatefulSet {
		obj = &appsv1.StatefulSet{}
	}
	obj.SetNamespace(w.ns)
	obj.SetName(w.name)
	return c.e.kube.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(body)))
}

// roll changes w's pod template, and clears its dirty mark: from now on its
// status shows the rollout.
func (c *churn) roll(ctx context.Context, w *workload) error {
	c.mu.Lock()
	c.rollouts++
	n := c.rollouts
	c.mu.Unlock()
	err := c.patch(ctx, w, fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:"%d"}}}}}`, rolloutAnnotation, n))
	if err == nil {
		c.m.mu.Lock()
		w.dirty = false
		c.m.mu.Unlock()
	}
	return err
}

func (c *churn) rollout(ctx context.Context, rng *rand.Rand) (string, error) {
	w := c.pick(rng, (*workload).scalable)
	return w.key(), c.roll(ctx, w)
}

func (c *churn) scale(ctx context.Context, rng *rand.Rand) (string, error) {
	w := c.pick(rng, (*workload).scalable)
	n := 1 + rng.Int32N(w.max)
	return fmt.Sprintf("%s to %d", w.key(), n), c.patch(ctx, w, fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))
}

// job creates the next Job of a Job slot (the finished ones go a minute
// after they finish: ttlSecondsAfterFinished).
func (c *churn) job(ctx context.Context, rng *rand.Rand) (string, error) {
	w := c.pick(rng, func(w *workload) bool { return w.kind == kindJob })
	c.m.mu.Lock()
	obj := c.e.object(w)
	c.m.mu.Unlock()
	return obj.GetName(), c.e.kube.Create(ctx, obj)
}

// repoint changes the model (update) and marks the workloads ok accepts
// dirty, in one step (a sample in between would hold their pods to the new
// strategy), waits for the policy change to reach apportion (observed),
// then rolls them so that their pods follow it.
func (c *churn) repoint(ctx context.Context, update func(), observed func(context.Context) bool, ok func(*workload) bool) error {
	var ws []*workload
	c.m.mu.Lock()
	update()
	for _, w := range c.m.workloads {
		if ok(w) {
			w.dirty = true
			ws = append(ws, w)
		}
	}
	c.m.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	for !observed(wctx) {
		if sleep(wctx, time.Second) != nil {
			break
		}
	}
	cancel()
	// The leader's caches, which decide, are the ones that wrote the
	// policy's status (or, for a deletion, had 10 s).
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	var errs []error
	for _, w := range ws {
		errs = append(errs, c.roll(ctx, w))
	}
	return errors.Join(errs...)
}

// cycle creates pol when it does not exist; else deletes it (half the
// time, or when next is its strategy cur already) or changes its strategy
// to next. It returns what it did and the strategy pol has now ("":
// deleted).
func (c *churn) cycle(ctx context.Context, rng *rand.Rand, pol client.Object, exists bool, cur, next string) (string, string, error) {
	switch {
	case !exists:
		return "created", next, c.e.kube.Create(ctx, pol)
	case rng.IntN(2) == 0 || next == cur:
		return "deleted", "", c.e.kube.Delete(ctx, pol)
	default:
		return "changed", next, c.e.kube.Patch(ctx, pol, client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"spec":{"strategy":{"text":%q}}}`, next)))
	}
}

// observed reports whether apportion has seen the latest spec of pol: its
// status' observedGeneration (written by the leader) caught up; a deleted
// policy counts as seen 10 s after.
func (c *churn) observed(pol client.Object, deleted bool) func(context.Context) bool {
	if deleted {
		at := time.Now()
		return func(context.Context) bool { return time.Since(at) > 10*time.Second }
	}
	return func(ctx context.Context) bool {
		var gen, seen int64
		switch p := pol.(type) {
		case *v1alpha1.PlacementPolicy:
			var cur v1alpha1.PlacementPolicy
			if c.e.kube.Get(ctx, client.ObjectKeyFromObject(p), &cur) != nil {
				return false
			}
			gen, seen = cur.Generation, cur.Status.ObservedGeneration
		case *v1alpha1.ClusterPlacementPolicy:
			var cur v1alpha1.ClusterPlacementPolicy
			if c.e.kube.Get(ctx, client.ObjectKeyFromObject(p), &cur) != nil {
				return false
			}
			gen, seen = cur.Generation, cur.Status.ObservedGeneration
		}
		return gen > 0 && seen >= gen
	}
}

// placementPolicy creates, changes or deletes one group's PlacementPolicy.
func (c *churn) placementPolicy(ctx context.Context, rng *rand.Rand) (string, error) {
	g := policyGroups[rng.IntN(len(policyGroups))]
	next := strategies[rng.IntN(len(strategies))]
	c.m.mu.Lock()
	cur, exists := c.m.pp[g]
	c.m.mu.Unlock()
	pol := placementPolicy(g, next)
	what, next, err := c.cycle(ctx, rng, pol, exists, cur, next)
	detail := fmt.Sprintf("%s %s/%s", what, nsPolicies, pol.Name)
	if err != nil {
		return detail, err
	}
	update := func() {
		if next == "" {
			delete(c.m.pp, g)
		} else {
			c.m.pp[g] = next
		}
	}
	return detail, c.repoint(ctx, update, c.observed(pol, next == ""), func(w *workload) bool { return w.ns == nsPolicies && w.group == g })
}

// clusterPolicy creates, changes or deletes the churned
// ClusterPlacementPolicy.
func (c *churn) clusterPolicy(ctx context.Context, rng *rand.Rand) (string, error) {
	next := strategies[rng.IntN(len(strategies))]
	c.m.mu.Lock()
	cur := c.m.cluster
	c.m.mu.Unlock()
	pol := clusterPolicy("soak-churn", churnLabel, next, 10)
	what, next, err := c.cycle(ctx, rng, pol, cur != "", cur, next)
	detail := what + " ClusterPlacementPolicy soak-churn"
	if err != nil {
		return detail, err
	}
	update := func() { c.m.cluster = next }
	return detail, c.repoint(ctx, update, c.observed(pol, next == ""), func(w *workload) bool { return w.ns == nsCluster })
}

// spotInterruption deletes a spot NodeClaim, as Karpenter does when the
// cloud reclaims the instance: the node is drained and goes.
func (c *churn) spotInterruption(ctx context.Context, rng *rand.Rand) (string, error) {
	var claims karpv1.NodeClaimList
	if err := c.e.kube.List(ctx, &claims, client.MatchingLabels{karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeSpot}); err != nil {
		return "listing spot NodeClaims", err
	}
	var live []karpv1.NodeClaim
	for _, nc := range claims.Items {
		if nc.DeletionTimestamp == nil {
			live = append(live, nc)
		}
	}
	if len(live) == 0 {
		return "no spot NodeClaim", nil
	}
	sort.Slice(live, func(i, j int) bool { return live[i].Name < live[j].Name })
	nc := live[rng.IntN(len(live))]
	err := c.e.kube.Delete(ctx, &nc)
	if apierrors.IsNotFound(err) {
		err = nil
	}
	return fmt.Sprintf("deleted NodeClaim %s (node %s)", nc.Name, nc.Status.NodeName), err
}

// limitPools are the NodePools whose limits are lowered in turn.
var limitPools = []string{"spot-amd64", "on-demand-amd64", "spot-arm64", "on-demand-arm64"}

// nodePoolLimits lowers a NodePool's node limit to the nodes it has (no
// new node), holds it 90 to 150 s, then raises it back.
func (c *churn) nodePoolLimits(ctx context.Context, rng *rand.Rand) (string, error) {
	name := limitPools[rng.IntN(len(limitPools))]
	var np karpv1.NodePool
	if err := c.e.kube.Get(ctx, client.ObjectKey{Name: name}, &np); err != nil {
		return "reading NodePool " + name, err
	}
	orig := np.Spec.Limits.DeepCopy()
	nodes := np.Status.Resources[corev1.ResourceName("nodes")]
	lowered := orig.DeepCopy()
	if lowered == nil {
		lowered = karpv1.Limits{}
	}
	lowered[corev1.ResourceName("nodes")] = nodes
	if err := c.setLimits(ctx, name, lowered); err != nil {
		return "lowering the limits of " + name, err
	}
	hold := 90*time.Second + time.Duration(rng.IntN(60))*time.Second
	_ = sleep(ctx, hold)
	// Raised back even when the run is over.
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	detail := fmt.Sprintf("%s: nodes limit %s for %s, then %s again", name, nodes.String(), hold, limitString(orig))
	return detail, c.setLimits(rctx, name, orig)
}

func limitString(l karpv1.Limits) string {
	if q, ok := l[corev1.ResourceName("nodes")]; ok {
		return q.String()
	}
	return "none"
}

func (c *churn) setLimits(ctx context.Context, name string, l karpv1.Limits) error {
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	// A merge patch keeps the keys it does not name: name "nodes" always.
	limits := map[string]any{"nodes": nil}
	for k, v := range l {
		limits[string(k)] = v.String()
	}
	body, err := json.Marshal(map[string]any{"spec": map[string]any{"limits": limits}})
	if err != nil {
		return err
	}
	return c.e.kube.Patch(ctx, np, client.RawPatch(types.MergePatchType, body))
}

// leader returns the process of the replica that reports holding the
// placement Lease.
func (c *churn) leader(ctx context.Context) (*framework.PodProcess, error) {
	for ctx.Err() == nil {
		for _, p := range c.e.kubelet.Processes() {
			if isLeader(c.e, p) {
				return p, nil
			}
		}
		if sleep(ctx, time.Second) != nil {
			break
		}
	}
	return nil, fmt.Errorf("no replica reports itself leader: %w", ctx.Err())
}

func isLeader(e *env, p *framework.PodProcess) bool {
	body, err := framework.HTTPGet(e.c, "http://"+net.JoinHostPort(p.IP, "8080")+"/metrics")
	return err == nil && strings.Contains(body, `leader_election_master_status{name="`+release+`"} 1`)
}

// leaderKill deletes the leader's pod (SIGTERM after its preStop sleep,
// as a node drain or `kubectl delete pod` does) and waits for two
// replicas and a leader again.
func (c *churn) leaderKill(ctx context.Context, _ *rand.Rand) (string, error) {
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p, err := c.leader(lctx)
	if err != nil {
		return "finding the leader", err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
	if err := c.e.kube.Delete(ctx, pod); err != nil {
		return "deleting pod " + p.Name, err
	}
	start := time.Now()
	err = c.e.waitReplicas(ctx, 4*time.Minute, p.Name)
	return fmt.Sprintf("deleted the leader's pod %s; 2 other replicas and a new leader after %s", p.Name, time.Since(start).Round(time.Second)), err
}

// leaderFreeze stops the leader's process (SIGSTOP) for 30 to 60 s, as a
// hung process or a node cut off would, then thaws it (SIGCONT); the
// thawed replica finds the Lease taken and, should it exit, its pod is
// restarted (restartExited).
func (c *churn) leaderFreeze(ctx context.Context, rng *rand.Rand) (string, error) {
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p, err := c.leader(lctx)
	if err != nil {
		return "finding the leader", err
	}
	hold := 30*time.Second + time.Duration(rng.IntN(31))*time.Second
	c.mu.Lock()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		c.mu.Unlock()
		return "freezing " + p.Name, err
	}
	c.frozen = append(c.frozen, window{From: time.Now()})
	i := len(c.frozen) - 1
	c.frozenPod = p.Name
	c.mu.Unlock()
	_ = sleep(ctx, hold)
	// Thawed even when the run is over.
	err = p.Signal(syscall.SIGCONT)
	c.mu.Lock()
	c.frozen[i].To = time.Now().Add(frozenMargin)
	c.frozenPod = ""
	c.mu.Unlock()
	detail := fmt.Sprintf("froze the leader %s (SIGSTOP) for %s, then SIGCONT", p.Name, hold)
	if err != nil {
		return detail, err
	}
	// The other replica took the Lease meanwhile; the thawed one steps
	// down (and may exit: restartExited replaces it).
	return detail, c.e.waitReplicas(ctx, 4*time.Minute)
}

// helmUpgrade upgrades the release with a changed pod annotation, which
// rolls both replicas one after the other (the chart's maxUnavailable 1).
func (c *churn) helmUpgrade(ctx context.Context, _ *rand.Rand) (string, error) {
	c.mu.Lock()
	c.upgrades++
	n := c.upgrades
	c.mu.Unlock()
	before := slices.Sorted(maps.Keys(c.e.kubelet.Processes()))
	args := append([]string{"upgrade", release, chartDir(), "-n", namespace}, chartValues()...)
	args = append(args, "--set-string", fmt.Sprintf(`podAnnotations.soak\.apportion\.dev/upgrade=%d`, n), "--wait", "--timeout", "5m")
	start := time.Now()
	if err := c.e.helm(ctx, args...); err != nil {
		return fmt.Sprintf("helm upgrade %d", n), err
	}
	// --wait returns once the Deployment is rolled out; wait for the old
	// replicas to be gone and the new ones to lead.
	err := c.e.waitReplicas(ctx, 4*time.Minute, before...)
	after := slices.Sorted(maps.Keys(c.e.kubelet.Processes()))
	return fmt.Sprintf("helm upgrade %d rolled %v to %v in %s", n, before, after, time.Since(start).Round(time.Second)), err
}

// restartExited deletes the pod of a chart replica whose process exited
// (a replica that lost its Lease exits), as the kubelet would restart
// its container: the Deployment replaces it.
func (c *churn) restartExited(ctx context.Context) {
	for sleep(ctx, 2*time.Second) == nil {
		for _, p := range c.e.kubelet.All() {
			select {
			case <-p.Exited:
			default:
				continue
			}
			if p.Stopping() {
				continue
			}
			var pod corev1.Pod
			err := c.e.kube.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, &pod)
			if err != nil || pod.UID != p.UID || pod.DeletionTimestamp != nil {
				continue
			}
			if err := c.e.kube.Delete(ctx, &pod); err == nil {
				say("restarting %s: its process exited (status %d)", p.Name, p.ExitCode())
			}
		}
	}
}

// frozenName is the pod of the replica frozen now, or "".
func (c *churn) frozenName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozenPod
}

// windows returns the frozen moments so far.
func (c *churn) windows() []window {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.frozen)
}
