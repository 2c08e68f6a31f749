// Package deletioncost keeps controller.kubernetes.io/pod-deletion-cost on the
// decided pods of each revision so that, when a workload scales down, the
// ReplicaSet controller removes pods in an order that keeps every
// intermediate size within quota, or as close to it as the pods allow.
//
// A decided pod counts in the group it runs in, pods placed by capacity
// fallback included. Within a group the pods are ranked from the one a
// scale-down removes last (1) up, in the order their current costs give,
// pods without a cost (new ones) first, newest first; a pod's cost is minus
// the position of its rank on the engine's path, the number of pods the
// engine places before the group's pod of that rank when a workload grows
// from none (apportion.Method.Position). Lowest cost first, a scale-down
// removes the highest positions first, so the pods left are the engine's
// split at their number wherever the pods exist: a workload the engine grew
// walks its path back, from -(n-1) to 0, and a group holding more than its
// part (on-demand after spot was out) loses pods only while it is above
// quota, the pods of the other groups staying. A pod added takes its group's
// next rank and moves no other cost, and a scale-down that removes the
// lowest cost moves none either, so the placement controller writes a new
// pod's cost with its decision, in the same patch. Worked example (the AWS
// sample webhook's strategy, whose path goes od od spot spot od spot spot
// spot od ...; pods p0..p4 placed on-demand while spot was out, then p5..p9
// on spot):
//
//	removal order:  od(p4) od(p3) spot(p9) spot(p8) spot(p7) od(p2) spot(p6) spot(p5) od(p1) od(p0)
//	cost:           -12    -8     -7       -6       -5       -4     -3       -2       -1     0
//	on-demand left: 4      3      3        3        3        2      2        2        1      0
//	spot left:      5      5      4        3        2        2      1        0        0      0
//
// At 10 pods the split cannot be within quota (on-demand's share is 4); from
// 9 pods down it is.
//
// Pods whose group is not in the strategy (placed under an older one) get the
// lowest cost of all, and so do the pods released beyond caps (the placement
// controller writes it with their release) and the revision's strays: pods
// admitted without a decision (the webhook was down or its call failed open)
// or released by the gate janitor, and the pods whose decision annotations
// apportion did not sign (a client wrote them): they are undecided. None of
// these is ranked in a group by its node. Decided pods without a
// position (a group of weight 0 past its base, or a strategy whose period,
// its weights' total over their greatest common divisor, passes
// apportion.MaxPeriod) come next, numbered down from decision.OffPathCost,
// newest first. With three groups or more, a split one group is short on
// can be brought closer to quota than the positions go: the engine's Victim
// then orders the revision, within a group still in the order of the
// current costs, and the costs number that order from -(n-1) to 0. Pods
// still held by the gate are left alone (the placement controller is about
// to patch them). A revision with no decided pod is not apportion's: its
// pods are never touched.
//
// Pods decided in shadow mode (a signed apportion.dev/shadow) are left alone
// while their workload is in shadow mode, by its own mode, its
// PlacementPolicy's or the default (--default-mode). Once it has left shadow
// mode without a rollout, the new pods are decided around the running shadow
// pods, which the placement controller counts in the group their node's
// labels match; so does the order here: a bound shadow pod ranks in its
// node's group with the decided pods (one on a node of no group is a stray,
// one not bound yet is left alone), below the pods decided since, which the
// placement controller numbered on top of them. Each shadow pod takes a cost
// once, at the first reconcile after a pod of its revision is decided, and a
// scale-down then removes pods from a group only while it holds more than
// its quota, instead of the pods decided since first.
//
// A revision is reconciled a little after the pod events that can change its
// costs (events.go), so that a burst becomes a few reconciles; a pod placed
// with its cost, or a pod's status changing, changes nothing.
package deletioncost

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/split"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Annotation is the Kubernetes pod deletion cost annotation.
const Annotation = corev1.PodDeletionCost

// PodAnnotations are the pod annotations this controller reads: an informer
// cache of pods keeps these.
var PodAnnotations = []string{Annotation, annotations.Group, annotations.Fallback, annotations.Shadow}

// IndexOwnerKey indexes pods by workload.OwnerKey: the pods of one revision.
const IndexOwnerKey = "apportion.ownerKey"

// DefaultDebounce is how long after an event a revision is reconciled.
const DefaultDebounce = time.Second

// Controller maintains deletion costs per revision.
type Controller struct {
	kubeClient client.Client
	signer     *decision.Signer
	resolve    []workload.Option
	strategies *compiled.Cache
	debounce   time.Duration
	recorder   *apevents.Recorder

	mu sync.Mutex
	// verified remembers, per revision and pod, at which resourceVersion
	// the pod's decision verified (or did not): the annotations cannot
	// change without it, so a reconcile checks only the pods written
	// since the last one.
	verified map[string]map[types.UID]verdict
	// decided are the revisions holding a decided pod, each with whether
	// its shadow pods take costs (its workload was not in shadow mode at
	// the last reconcile): only their strays' events, and the counted
	// shadow pods', are worth a reconcile.
	decided map[string]bool
}

type verdict struct {
	resourceVersion string
	decided         bool
	shadow          bool // decided in shadow mode (signed apportion.dev/shadow)
}

// NewController builds the deletion-cost controller; signer recognises
// apportion's decisions (the placement controller's Signer).
func NewController(kubeClient client.Client, signer *decision.Signer) *Controller {
	return &Controller{kubeClient: kubeClient, signer: signer, strategies: compiled.NewCache(compiled.DefaultSize),
		debounce: DefaultDebounce, verified: map[string]map[types.UID]verdict{}, decided: map[string]bool{}}
}

// WithStrategies compiles strategies through cache, shared with the other
// controllers, instead of a cache of its own.
func (c *Controller) WithStrategies(cache *compiled.Cache) *Controller {
	c.strategies = cache
	return c
}

// WithRecorder publishes the Warning Event of a second deletion-cost writer
// (see warnSecondWriter) through r.
func (c *Controller) WithRecorder(r *apevents.Recorder) *Controller {
	c.recorder = r
	return c
}

// WithPolicies orders the pods of workloads whose strategy comes from a
// PlacementPolicy too; src may be nil.
func (c *Controller) WithPolicies(src workload.PolicySource) *Controller {
	c.resolve = append(c.resolve, workload.WithPolicies(src)) // nil src: annotations only
	return c
}

// WithDefaultMode is the mode of the workloads that name none
// (--default-mode), as the placement controller has it: the shadow pods of a
// workload in shadow mode are left alone, the others' take costs.
func (c *Controller) WithDefaultMode(mode string) *Controller {
	c.resolve = append(c.resolve, workload.WithDefaultMode(mode))
	return c
}

// WithDebounce reconciles a revision d after the first event of a burst
// instead of DefaultDebounce.
func (c *Controller) WithDebounce(d time.Duration) *Controller {
	c.debounce = d
	return c
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "deletioncost" }

// Register adds the controller; requests are keyed by namespace and owner key
// (one revision), not by pod.
func (c *Controller) Register(ctx context.Context, m manager.Manager) error {
	// The pods of one revision, listed per reconcile through this index.
	if err := m.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, IndexOwnerKey, func(o client.Object) []string {
		// The owner and labels of a cached pod (podcache.Pod) are read
		// in place: no view of the whole pod on every pod event.
		if k := ownerKey(o); k != "" {
			return []string{k}
		}
		return nil
	}); err != nil {
		return err
	}
	return controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		Watches(&corev1.Pod{}, c.EventHandler()).
		Complete(c)
}

// Reconcile recomputes the costs of one revision and patches the pods whose
// cost changed.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var list corev1.PodList
	if err := c.kubeClient.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingFields{IndexOwnerKey: req.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing pods: %w", err)
	}
	rev := req.Namespace + "/" + req.Name
	pods, shadows, decided := c.revisionPods(rev, list.Items)
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
	c.countShadows(rev, !info.Shadow())
	if !info.Shadow() {
		pods = append(pods, c.byNode(ctx, s, shadows)...)
	}
	costs := costsOf(s, pods)
	patched := 0
	for _, p := range pods {
		want := strconv.Itoa(costs[p.UID])
		if p.Annotations[Annotation] == want {
			continue
		}
		if who := decision.CostWriter(p); who != "" {
			c.warnSecondWriter(ctx, info.Workload.ObjectReference(), p, who)
		}
		if err := c.patch(ctx, p, want); err != nil {
			return reconcile.Result{}, err
		}
		patched++
	}
	log.FromContext(ctx).V(1).Info("deletion costs up to date", "pods", len(pods), "patched", patched)
	return reconcile.Result{}, nil
}

// revisionPods are the live pods of a revision that take a cost: the decided
// ones and the strays; decided counts the former. shadows are its live pods
// decided in shadow mode, which take a cost only once the workload has left
// shadow mode.
func (c *Controller) revisionPods(rev string, items []corev1.Pod) (pods, shadows []*corev1.Pod, decided int) {
	c.mu.Lock()
	seen := c.verified[rev]
	c.mu.Unlock()
	now := make(map[types.UID]verdict, len(items))
	for i := range items {
		p := &items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		v, ok := seen[p.UID]
		if !ok || v.resourceVersion != p.ResourceVersion || p.ResourceVersion == "" {
			v = verdict{resourceVersion: p.ResourceVersion, decided: c.isDecided(p)}
			v.shadow = !v.decided && c.isShadow(p)
		}
		now[p.UID] = v
		switch {
		case v.decided:
			decided++
			pods = append(pods, p)
		case v.shadow:
			// Decided in shadow mode: apportion changes nothing on it,
			// its deletion cost included, while the workload is in
			// shadow mode (Reconcile tells).
			shadows = append(shadows, p)
		case !decision.HasGate(p):
			// A stray: admitted without a decision (the webhook was down, or
			// its call failed open), released by the janitor, or carrying
			// decision annotations a client wrote; or released beyond
			// caps. It goes first.
			pods = append(pods, unsigned(p))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if decided == 0 {
		delete(c.verified, rev)
		delete(c.decided, rev)
	} else {
		c.verified[rev] = now
		if _, ok := c.decided[rev]; !ok {
			c.decided[rev] = false // its shadow pods counted once Reconcile has read the mode
		}
	}
	return pods, shadows, decided
}

// countShadows records whether the revision's shadow pods take costs.
func (c *Controller) countShadows(rev string, counted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.decided[rev]; ok {
		c.decided[rev] = counted
	}
}

// byNode are the bound shadow pods of a workload no longer in shadow mode as
// Costs must see them: pods of the group their node serves, as the
// placement controller counts them (strays of the revision, by their node),
// so that a scale-down removes them from a group only while it holds more
// than its quota. A shadow pod on a node of no group is a stray like any
// other, first to go; one not bound yet is left alone (the ReplicaSet
// controller removes pods without a node first whatever their costs).
func (c *Controller) byNode(ctx context.Context, s *compiled.Strategy, shadows []*corev1.Pod) []*corev1.Pod {
	if len(shadows) == 0 {
		return nil
	}
	groupOf := split.Matcher(s)
	nodes := map[string]int{}
	out := make([]*corev1.Pod, 0, len(shadows))
	for _, p := range shadows {
		if p.Spec.NodeName == "" {
			continue
		}
		g, ok := nodes[p.Spec.NodeName]
		if !ok {
			g = c.nodeGroup(ctx, groupOf, p.Spec.NodeName)
			nodes[p.Spec.NodeName] = g
		}
		q := *p
		q.Annotations = make(map[string]string, len(p.Annotations)+1)
		for k, v := range p.Annotations {
			if k != annotations.Group && k != annotations.Fallback {
				q.Annotations[k] = v
			}
		}
		if g >= 0 {
			q.Annotations[annotations.Group] = s.Strategy.Groups[g].Key()
		}
		out = append(out, &q)
	}
	return out
}

// nodeGroup is the index of the group the node serves by its labels (the
// metadata cache's), -1 for none or a node not cached.
func (c *Controller) nodeGroup(ctx context.Context, groupOf func(map[string]string) int, name string) int {
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := c.kubeClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return -1
	}
	return groupOf(node.Labels)
}

// isDecided reports whether apportion placed the pod in a group.
func (c *Controller) isDecided(p *corev1.Pod) bool {
	d, ok := c.signer.Read(p)
	return ok && d.Group != ""
}

// isShadow reports whether apportion decided the pod in shadow mode: such a
// pod is neither decided nor a stray, and never patched.
func (c *Controller) isShadow(p *corev1.Pod) bool {
	if !decision.HasShadow(p) {
		return false
	}
	_, ok := c.signer.ReadShadow(p)
	return ok
}

// patch writes the pod's cost with a merge patch of that one annotation: no
// copy of the pod to diff against.
func (c *Controller) patch(ctx context.Context, p *corev1.Pod, cost string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{Annotation: cost}}})
	if err != nil {
		return fmt.Errorf("encoding the deletion cost: %w", err)
	}
	if err := c.kubeClient.Patch(ctx, p, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	metrics.DeletionCostPatchesTotal.Inc()
	return nil
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
