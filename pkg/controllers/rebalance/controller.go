// Package rebalance replaces fallback pods once their group is back, for the
// workloads that ask for it (apportion.dev/rebalance: "true"; the operator
// registers it with --rebalance). It runs on the elected leader.
//
// A fallback pod was placed while some group of its strategy was out of
// capacity (annotation apportion.dev/fallback lists those groups; only a
// decision apportion signed counts, so a client cannot mark a pod for
// eviction). When one of them can be chosen again (capacity.Capacity, as
// placement asks: its NodePool or label set is no longer marked out) and the
// split needs the pod there, the pod is
// evicted through the Eviction API, so PodDisruptionBudgets apply; its
// controller recreates it and placement puts the new pod where the
// strategy's quota now says. The split needs it when, over the controller's
// running pods with a signed decision, the pod's group holds more pods than
// the engine's split at their number, the group it fell back from fewer, and
// the engine gives the place the eviction frees to that group: otherwise the
// replacement would land in the pod's own group again (the split was
// repaired meanwhile, by a scale-down or by other evictions).
//
// One at a time per workload: a pod is evicted only while every other pod of
// its controller runs, and after an eviction only once a pod its controller
// created since runs. A replacement that cannot get capacity stays Pending, which stops the
// workload's rebalancing; the capacity detector then marks the group out
// again and deletes the stuck pod, as for any other pod. Evictions across
// the cluster are paced by one limiter.
package rebalance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// OwnerIndex indexes pods by their controller's UID.
const OwnerIndex = "rebalance.controller-uid"

// Pacing.
const (
	// Recheck is when a fallback pod is looked at again while its group is
	// still out, or its workload busy.
	Recheck = 15 * time.Second
	// Blocked is when an eviction refused by a PodDisruptionBudget, or
	// failed, is tried again.
	Blocked = 30 * time.Second
	// forget bounds how long an eviction holds its workload back when no
	// replacement comes (the workload was scaled down meanwhile).
	forget = 10 * time.Minute
)

// Limiter paces the evictions; *rate.Limiter is one.
type Limiter interface {
	Wait(ctx context.Context) error
}

// Controller evicts fallback pods whose group is back.
type Controller struct {
	clk      clock.Clock
	kube     client.Client
	recorder events.EventRecorder
	capacity capacity.Capacity
	policies workload.PolicySource
	signer   *decision.Signer
	limiter  Limiter
	// strategies compiles the workloads' strategy texts.
	strategies *compiled.Cache

	mu      sync.Mutex
	evicted map[types.UID]eviction // controller UID -> its last eviction
}

// eviction: when, and the pods the controller had then; a pod not among
// them is a replacement.
type eviction struct {
	at    time.Time
	known sets.Set[types.UID]
}

// NewController builds the controller; signer recognises apportion's
// decisions (the placement controller's Signer), QPS bounds evictions
// cluster-wide.
func NewController(clk clock.Clock, kube client.Client, recorder events.EventRecorder, groupCapacity capacity.Capacity, policies workload.PolicySource, signer *decision.Signer, qps float64) *Controller {
	return &Controller{
		clk: clk, kube: kube, recorder: recorder, capacity: groupCapacity, policies: policies, signer: signer,
		limiter:    rate.NewLimiter(rate.Limit(qps), 1),
		evicted:    map[types.UID]eviction{},
		strategies: compiled.NewCache(compiled.DefaultSize),
	}
}

// WithStrategies compiles strategies through cache, shared with the other
// controllers, instead of a cache of its own.
func (c *Controller) WithStrategies(cache *compiled.Cache) *Controller {
	c.strategies = cache
	return c
}

// WithLimiter replaces the limiter (tests).
func (c *Controller) WithLimiter(l Limiter) *Controller {
	c.limiter = l
	return c
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "rebalance" }

// Register adds the owner index and the pod controller to the manager.
func (c *Controller) Register(ctx context.Context, m manager.Manager) error {
	if err := m.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, OwnerIndex, ownerIndex); err != nil {
		return fmt.Errorf("indexing pods by controller: %w", err)
	}
	return controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			pod, ok := podcache.View(o)
			if !ok {
				return false
			}
			_, candidate := c.candidate(pod)
			return candidate
		}))).
		// One worker: two pods of one workload are never weighed at once.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(reconcile.AsReconciler(m.GetClient(), c))
}

func ownerIndex(o client.Object) []string {
	if owner := metav1.GetControllerOfNoCopy(o); owner != nil {
		return []string{string(owner.UID)}
	}
	return nil
}

// candidate: a fallback pod (by a decision apportion signed) that runs, of a
// ReplicaSet or StatefulSet (which recreate what is evicted). It returns the
// pod's decision.
func (c *Controller) candidate(pod *corev1.Pod) (decision.Verified, bool) {
	if !podutil.IsScheduled(pod) || podutil.IsTerminating(pod) || pod.Status.Phase != corev1.PodRunning || !workload.Recreated(pod) {
		return decision.Verified{}, false
	}
	d, ok := c.signer.Read(pod)
	return d, ok && len(d.Fallback) > 0
}

// Reconcile weighs one fallback pod and evicts it when a group it fell back
// from is back, its workload is settled and the split needs the pod there.
func (c *Controller) Reconcile(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	d, ok := c.candidate(pod)
	if !ok {
		return reconcile.Result{}, nil
	}
	info, err := workload.Resolve(ctx, c.kube, pod.Namespace, pod, workload.WithPolicies(c.policies))
	if errors.Is(err, workload.ErrNotCached) {
		return reconcile.Result{RequeueAfter: Recheck}, nil
	}
	if err != nil || info == nil || !info.Rebalance || !info.Found {
		return reconcile.Result{}, nil
	}
	cs, err := c.strategies.Get(info.Strategy)
	if err != nil {
		return reconcile.Result{}, nil // the placement controller reports it
	}
	back, avail, err := c.back(ctx, cs.Strategy, pod, d, string(info.Workload.UID))
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(back) == 0 {
		return reconcile.Result{RequeueAfter: Recheck}, nil
	}
	owner := metav1.GetControllerOfNoCopy(pod)
	var pods corev1.PodList
	if err := c.kube.List(ctx, &pods, client.InNamespace(pod.Namespace), client.MatchingFields{OwnerIndex: string(owner.UID)}); err != nil {
		return reconcile.Result{RequeueAfter: Recheck}, err
	}
	known, busy := c.busy(pod, owner.UID, pods.Items)
	if busy {
		return reconcile.Result{RequeueAfter: Recheck}, nil
	}
	to, needed := c.needed(cs, d, pods.Items, avail, back)
	if !needed {
		log.FromContext(ctx).V(1).Info("fallback pod left in place: the split does not need it elsewhere", "back", strings.Join(back, ";"))
		return reconcile.Result{RequeueAfter: Recheck}, nil
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return reconcile.Result{}, nil // shutting down
	}
	return c.evict(ctx, pod, owner.UID, known, info, to), nil
}

// back lists the groups the pod fell back from (d.Fallback) that can be
// chosen again, and avail the groups that can. The pod is weighed as it was
// before its decision: without the required node affinity the decision added
// (its group's labels and NodePool), which pins it to the group it runs in.
// The user's own constraints, and the architectures, stay.
func (c *Controller) back(ctx context.Context, s *strategy.Strategy, pod *corev1.Pod, d decision.Verified, scope string) (back []string, avail apportion.Set, err error) {
	_, errs, err := c.capacity.Choose(ctx, s, undecided(s, pod, d.Group), nil, scope)
	if err != nil {
		return nil, 0, err
	}
	avail = apportion.All
	for i, g := range s.Groups {
		if i >= len(errs) || errs[i] != nil {
			avail = avail.Without(i)
			continue
		}
		if slices.Contains(d.Fallback, g.Key()) {
			back = append(back, g.Key())
		}
	}
	return back, avail, nil
}

// needed reports whether evicting the pod (decided d) moves the split toward
// the strategy, and to which group its replacement goes. Over the
// controller's running pods with a signed decision in a group of s (their
// number n over the available groups): the pod's group holds more pods than
// the engine's split at n, and the group the engine gives the freed place to
// is one the pod fell back from (back) that holds fewer. Without that, the
// replacement would land where the pod is.
func (c *Controller) needed(cs *compiled.Strategy, d decision.Verified, pods []corev1.Pod, avail apportion.Set, back []string) (string, bool) {
	s, m, index := cs.Strategy, cs.Method, cs.Index
	counts := make([]int64, len(s.Groups))
	var n int64
	for i := range pods {
		p := &pods[i]
		if podutil.IsTerminating(p) || p.Status.Phase != corev1.PodRunning {
			continue
		}
		v, ok := c.signer.Read(p)
		if !ok {
			continue
		}
		if gi, ok := index[v.Group]; ok {
			counts[gi]++
			if avail.Has(gi) {
				n++
			}
		}
	}
	split := m.CountsAt(n, avail)
	after := slices.Clone(counts)
	if cur, ok := index[d.Group]; ok {
		if counts[cur] <= split[cur] {
			return "", false // the pod's group is not above its share
		}
		after[cur]--
	}
	next := m.Next(after, avail)
	if next < 0 || counts[next] >= split[next] || !slices.Contains(back, s.Groups[next].Key()) {
		return "", false
	}
	return s.Groups[next].Key(), true
}

// undecided is a copy of pod without the required node affinity expressions
// on the keys its decision (group) set.
func undecided(s *strategy.Strategy, pod *corev1.Pod, group string) *corev1.Pod {
	probe := pod.DeepCopy()
	drop := map[string]bool{karpv1.NodePoolLabelKey: true}
	for _, g := range s.Groups {
		if g.Key() == group {
			for _, l := range g.Labels {
				drop[l.Key] = true
			}
		}
	}
	a := probe.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return probe
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchExpressions = slices.DeleteFunc(terms[i].MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return drop[r.Key] })
	}
	return probe
}

// busy: some other pod of the controller (pods) is not running (pending,
// gated, stopping), or no pod that came after the last eviction runs yet. It
// returns the controller's pods' UIDs.
func (c *Controller) busy(pod *corev1.Pod, owner types.UID, pods []corev1.Pod) (sets.Set[types.UID], bool) {
	c.mu.Lock()
	last, evicted := c.evicted[owner]
	if evicted && c.clk.Since(last.at) > forget {
		delete(c.evicted, owner)
		evicted = false
	}
	c.mu.Unlock()
	known := sets.New[types.UID]()
	replaced := !evicted
	for i := range pods {
		p := &pods[i]
		known.Insert(p.UID)
		if p.UID == pod.UID {
			continue
		}
		if podutil.IsTerminating(p) || !podutil.IsScheduled(p) || p.Status.Phase != corev1.PodRunning || decision.HasGate(p) {
			return nil, true
		}
		if evicted && !last.known.Has(p.UID) {
			replaced = true
		}
	}
	return known, !replaced
}

// remember records an eviction of owner's pods, and drops the records past
// forget: they hold nothing back any more, and the workloads they name may
// never come back to clear them. Evictions are paced by the limiter, so the
// map holds at most what the limiter lets through in forget.
func (c *Controller) remember(owner types.UID, known sets.Set[types.UID]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	for uid, e := range c.evicted {
		if now.Sub(e.at) > forget {
			delete(c.evicted, uid)
		}
	}
	c.evicted[owner] = eviction{at: now, known: known}
}

// evict evicts the pod, whose replacement goes to group to.
func (c *Controller) evict(ctx context.Context, pod *corev1.Pod, owner types.UID, known sets.Set[types.UID], info *workload.Info, to string) reconcile.Result {
	logger := log.FromContext(ctx).WithValues("namespace", pod.Namespace, "name", pod.Name, "to", to)
	req := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}},
	}
	err := c.kube.SubResource("eviction").Create(ctx, pod, req)
	ref := info.Workload.ObjectReference()
	switch {
	case err == nil:
		c.remember(owner, known)
		metrics.RebalanceEvictionsTotal.WithLabelValues("evicted").Inc()
		logger.Info("evicted a fallback pod: a group it fell back from has capacity again")
		// The pod as related object: one Event per eviction (the
		// recorder merges Events that differ only in their note).
		related := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
		c.recorder.Eventf(ref, related, corev1.EventTypeNormal, "Rebalanced", "Evict",
			"evicted fallback pod %s: %s can be chosen again and is short of its share; its replacement goes there", pod.Name, to)
		return reconcile.Result{}
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return reconcile.Result{} // gone or replaced meanwhile
	case apierrors.IsTooManyRequests(err):
		metrics.RebalanceEvictionsTotal.WithLabelValues("disruption_budget").Inc()
		logger.V(1).Info("eviction refused for now (PodDisruptionBudget)", "error", err.Error())
		return reconcile.Result{RequeueAfter: Blocked}
	default:
		metrics.RebalanceEvictionsTotal.WithLabelValues("error").Inc()
		logger.Error(err, "evicting a fallback pod")
		return reconcile.Result{RequeueAfter: Blocked}
	}
}
