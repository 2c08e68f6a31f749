// Package deletioncost keeps controller.kubernetes.io/pod-deletion-cost on the
// decided pods of each revision so that, when a workload scales down, the
// ReplicaSet controller removes pods in the order the apportioning engine's
// Victim picks, and every intermediate size stays within quota.
//
// The costs come from simulating the removal of every pod, one Victim at a
// time. The pod removed k-th of n gets cost -(n-k): the pods left after its
// removal, negated. The first to go has the lowest cost; the last has 0.
// Numbering from the bottom keeps the values of existing pods stable when a
// pod is added and Victim would take that pod first, so a scale-up patches
// only the new pod, not every pod of the revision. Worked example (the
// AWS sample webhook's strategy, pods p0..p5 placed od od spot spot od spot):
//
//	removal order (Victim): spot(p5) spot(p3) spot(p2) od(p4) od(p1) od(p0)
//	cost:                   -5       -4       -3       -2     -1     0
//	on-demand left:         3        3        3        2      1      0
//	spot left:              2        1        0        0      0      0
//
// Within a group, the newest pod goes first. Pods whose group is not in the
// strategy (placed under an older one) get the lowest cost of all, and so do
// the revision's strays: pods admitted without a decision (the webhook was
// down or its call failed open) or released by the gate janitor, and the pods
// whose decision annotations apportion did not sign (a client wrote them):
// they are undecided. Pods still
// held by the gate are left alone (the placement controller is about to
// patch them). A revision with no decided pod is not apportion's: its pods
// are never touched.
package deletioncost

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Annotation is the Kubernetes pod deletion cost annotation.
const Annotation = corev1.PodDeletionCost

// PodAnnotations are the pod annotations this controller reads: an informer
// cache of pods keeps these.
var PodAnnotations = []string{Annotation, annotations.Group, annotations.Fallback}

// IndexOwnerKey indexes pods by workload.OwnerKey: the pods of one revision.
const IndexOwnerKey = "apportion.ownerKey"

// unknownGroupCost is below every computed cost.
const unknownGroupCost = -(1 << 30)

// fallbackCost is the cost of the newest fallback pod; older ones get one
// more each, all below the costs of the split (>= -(pods-1)).
const fallbackCost = -(1 << 29)

func newestFirst(a, b *corev1.Pod) int {
	if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(b.Name, a.Name)
}

// Controller maintains deletion costs per revision.
type Controller struct {
	kubeClient client.Client
	signer     *decision.Signer
	resolve    []workload.Option
	strategies *compiled.Cache
}

// NewController builds the deletion-cost controller; signer recognises
// apportion's decisions (the placement controller's Signer).
func NewController(kubeClient client.Client, signer *decision.Signer) *Controller {
	return &Controller{kubeClient: kubeClient, signer: signer, strategies: compiled.NewCache(compiled.DefaultSize)}
}

// WithStrategies compiles strategies through cache, shared with the other
// controllers, instead of a cache of its own.
func (c *Controller) WithStrategies(cache *compiled.Cache) *Controller {
	c.strategies = cache
	return c
}

// WithPolicies orders the pods of workloads whose strategy comes from a
// PlacementPolicy too; src may be nil.
func (c *Controller) WithPolicies(src workload.PolicySource) *Controller {
	c.resolve = []workload.Option{workload.WithPolicies(src)} // nil src: annotations only
	return c
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "deletioncost" }

// Register adds the controller; requests are keyed by namespace and owner key
// (one revision), not by pod.
func (c *Controller) Register(ctx context.Context, m manager.Manager) error {
	// The pods of one revision, listed per reconcile through this index.
	if err := m.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, IndexOwnerKey, func(o client.Object) []string {
		if pod, ok := podcache.View(o); ok {
			if k := workload.OwnerKey(pod); k != "" {
				return []string{k}
			}
		}
		return nil
	}); err != nil {
		return err
	}
	return controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(c.revisionOf)).
		Complete(c)
}

// revisionOf maps a pod apportion decided to its revision's request.
func (c *Controller) revisionOf(_ context.Context, o client.Object) []reconcile.Request {
	pod, ok := podcache.View(o)
	if !ok {
		return nil
	}
	if d, ok := c.signer.Read(pod); !ok || d.Group == "" {
		return nil
	}
	key := workload.OwnerKey(pod)
	if key == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: key}}}
}

// Reconcile recomputes the costs of one revision and patches the pods whose
// cost changed.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var list corev1.PodList
	if err := c.kubeClient.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingFields{IndexOwnerKey: req.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing pods: %w", err)
	}
	var pods []*corev1.Pod
	decided := 0
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		switch d, ok := c.signer.Read(p); {
		case ok && d.Group != "":
			decided++
			pods = append(pods, p)
		case !decision.HasGate(p):
			// A stray: admitted without a decision (the webhook was down, or
			// its call failed open), released by the janitor, or carrying
			// decision annotations a client wrote. It goes first.
			pods = append(pods, unsigned(p))
		}
	}
	if decided == 0 {
		return reconcile.Result{}, nil // not a revision apportion places
	}
	info, err := workload.Resolve(ctx, c.kubeClient, req.Namespace, pods[0], c.resolve...)
	if err != nil || info == nil || !info.Found {
		return reconcile.Result{}, nil // nothing to order by; the owner may be gone
	}
	s, err := c.strategies.Get(info.Strategy)
	if err != nil {
		return reconcile.Result{}, nil
	}
	costs := costsOf(s, pods)
	for _, p := range pods {
		want := strconv.Itoa(costs[p.UID])
		if p.Annotations[Annotation] == want {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[Annotation] = want
		if err := c.kubeClient.Patch(ctx, p, patch); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("patching pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		metrics.DeletionCostPatchesTotal.Inc()
	}
	log.FromContext(ctx).V(1).Info("deletion costs up to date", "pods", len(pods))
	return reconcile.Result{}, nil
}

// unsigned is a stray as Costs must see it: without the decision annotations
// a client may have written on it (a copy, when it carries some).
func unsigned(p *corev1.Pod) *corev1.Pod {
	_, group := p.Annotations[annotations.Group]
	_, fallback := p.Annotations[annotations.Fallback]
	if !group && !fallback {
		return p
	}
	q := p.DeepCopy()
	decision.Strip(q)
	return q
}

// Costs computes the deletion cost of every pod of one revision; pods with
// no group of s (undecided, or decided under another strategy) get the
// lowest, then the pods placed by capacity fallback (newest first), then the
// others in the engine's Victim order: a scale-down removes the fallback
// pods before it touches the split. It takes the pods' group and fallback
// annotations as their decisions: the controller passes the pods whose
// decisions do not verify without them.
func Costs(s *strategy.Strategy, pods []*corev1.Pod) (map[types.UID]int, error) {
	cs, err := compiled.New(s)
	if err != nil {
		return nil, err
	}
	return costsOf(cs, pods), nil
}

// costsOf is Costs of a compiled strategy.
func costsOf(s *compiled.Strategy, pods []*corev1.Pod) map[types.UID]int {
	byGroup := make([][]*corev1.Pod, len(s.Index))
	costs := make(map[types.UID]int, len(pods))
	var fallback []*corev1.Pod
	for _, p := range pods {
		gi, ok := s.Index[p.Annotations[annotations.Group]]
		switch {
		case !ok:
			costs[p.UID] = unknownGroupCost
			continue
		case p.Annotations[annotations.Fallback] != "":
			fallback = append(fallback, p)
			continue
		}
		byGroup[gi] = append(byGroup[gi], p)
	}
	// Fallback pods: below every computed cost, above the strays; the
	// newest goes first.
	slices.SortFunc(fallback, newestFirst)
	for k, p := range fallback {
		costs[p.UID] = fallbackCost + k
	}
	counts := make([]int64, len(s.Index))
	var n int64
	for gi, ps := range byGroup {
		// Newest first: the next victim of a group is at the front.
		slices.SortFunc(ps, newestFirst)
		counts[gi] = int64(len(ps))
		n += counts[gi]
	}
	for left := n; left > 0; left-- {
		v := s.Method.Victim(counts, apportion.All)
		p := byGroup[v][0]
		byGroup[v] = byGroup[v][1:]
		counts[v]--
		costs[p.UID] = -int(left - 1)
	}
	return costs
}
