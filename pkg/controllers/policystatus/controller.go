// Package policystatus is the PlacementPolicy status controller (leader
// only). For each policy it asks the status engine (policy.Observer) which
// workloads the policy targets and what places each, as placement resolves
// it (workload.ResolveChain with the Source the placement controller uses),
// with their replicas and the node labels of the Running pods of those it
// places (those released beyond caps apart); and it asks capacity.Capacity which NodePool serves each group,
// as placement chooses. It writes the status pkg/policy computes through
// the status subresource when it changed. Placement itself reads policies
// through policy.Source at admission; this controller only reports.
//
// Reads: everything comes from the manager's caches, so a reconcile sends
// no request but the status patch; the one exception is an Argo Rollout's
// spec.replicas and pod template annotations (no Go type in the scheme: the
// manager's client reads unstructured objects from the API server). The
// apps/v1 kinds' spec is the typed object (workload.ReadSpec), which the
// cached client serves from an informer of its own. Jobs, CronJobs and
// Workflows are read from their metadata informers alone: their replicas
// are their live pods (a CronJob's, those of its Jobs), and their pods'
// annotations are their template's. Pods are read through the pod index by
// controller, only those of the targeted workloads. Reconciles come from
// policy changes, from pod, workload and NodePool events of the namespace
// (batched: one reconcile per policy per batchDelay), and every
// resyncPeriod.
package policystatus

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

const (
	// resyncPeriod re-reads every policy, for what no watched event
	// announces.
	resyncPeriod = 30 * time.Second
	// batchDelay collects the events of a namespace into one reconcile per
	// policy: a rollout's pod events do not each recompute the status.
	batchDelay = 2 * time.Second
)

// Options say which APIs the cluster serves.
type Options struct {
	// Kinds are the workload kinds followed (their metadata informers run);
	// a policy targeting another kind finds no workload.
	Kinds []schema.GroupVersionKind
	// NodePools is true when karpenter.sh/v1 NodePools are served: their
	// events requeue every policy.
	NodePools bool
	// Signer recognises the pods released beyond caps (the placement
	// controller's): they count in no group, whatever their node. nil:
	// none is recognised, and every Running pod counts by its node.
	Signer *decision.Signer
}

// Controller writes PlacementPolicy status.
type Controller struct {
	clock      clock.Clock
	kubeClient client.Client
	capacity   capacity.Capacity
	source     *policy.Source
	opts       Options
	strategies *compiled.Cache
}

// NewController builds the controller. kubeClient is the manager's cached
// client (with policy.IndexPolicies and the pod index by controller
// registered), source the Source the placement controller uses.
func NewController(clk clock.Clock, kubeClient client.Client, groupCapacity capacity.Capacity, source *policy.Source, opts Options) *Controller {
	return &Controller{clock: clk, kubeClient: kubeClient, capacity: groupCapacity, source: source, opts: opts,
		strategies: compiled.NewCache(compiled.DefaultSize)}
}

// WithStrategies compiles strategies through cache, shared with the other
// controllers, instead of a cache of its own.
func (c *Controller) WithStrategies(cache *compiled.Cache) *Controller {
	c.strategies = cache
	return c
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "policy.status" }

// Register adds the controller to the manager (leader only, the default).
// The pod index it reads (podcache.IndexController) is added with the
// controllers, once.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	b := policy.StatusController(m, c.Name(), &v1alpha1.PlacementPolicy{}).
		Watches(&corev1.Pod{}, policy.Requeue(batchDelay, podChanged, c.ofNamespace))
	for _, gvk := range c.opts.Kinds {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		b = b.Watches(obj, policy.Requeue(batchDelay, policy.WorkloadChanged, c.ofNamespace))
	}
	if c.opts.NodePools {
		b = b.Watches(&karpv1.NodePool{}, policy.Requeue(batchDelay, policy.GenerationChanged, func(ctx context.Context, _ client.Object) ([]reconcile.Request, error) {
			return c.policies(ctx)
		}))
	}
	return b.Complete(reconcile.AsReconciler(m.GetClient(), c))
}

// podChanged: a pod's count changes when it is bound, changes phase or
// starts terminating.
func podChanged(o, n client.Object) bool {
	op, ok1 := podcache.View(o)
	np, ok2 := podcache.View(n)
	if !ok1 || !ok2 {
		return true
	}
	return op.Status.Phase != np.Status.Phase || op.Spec.NodeName != np.Spec.NodeName ||
		(op.DeletionTimestamp == nil) != (np.DeletionTimestamp == nil)
}

// ofNamespace names the policies of obj's namespace.
func (c *Controller) ofNamespace(ctx context.Context, obj client.Object) ([]reconcile.Request, error) {
	return c.policies(ctx, client.InNamespace(obj.GetNamespace()))
}

// policies names the placement policies opts list.
func (c *Controller) policies(ctx context.Context, opts ...client.ListOption) ([]reconcile.Request, error) {
	var policies v1alpha1.PlacementPolicyList
	if err := c.kubeClient.List(ctx, &policies, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		return nil, err
	}
	out := make([]reconcile.Request, len(policies.Items))
	for i := range policies.Items {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&policies.Items[i])}
	}
	return out, nil
}

// Reconcile computes one policy's status and writes it when it changed.
func (c *Controller) Reconcile(ctx context.Context, p *v1alpha1.PlacementPolicy) (reconcile.Result, error) {
	if p.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	workloads, err := policy.NewObserver(c.kubeClient, c.source).WithUncachedSpecs().WithSigner(c.opts.Signer).
		Workloads(ctx, p, c.opts.Kinds)
	if err != nil {
		return reconcile.Result{}, err
	}
	var pools []policy.GroupPool
	// An invalid strategy needs no pools: Status reports it. Its raw text
	// does not compile either (it is "" or what the parser refused).
	raw, _ := policy.Strategy(&p.Spec)
	if cs, err := c.strategies.Get(raw); err == nil {
		if pools, err = c.pools(ctx, cs.Strategy); err != nil {
			return reconcile.Result{}, err
		}
	}
	status := policy.Status(p, workloads, pools, metav1.NewTime(c.clock.Now()))
	if equality.Semantic.DeepEqual(p.Status, status) {
		return reconcile.Result{RequeueAfter: resyncPeriod}, nil
	}
	if err := policy.PatchStatus(ctx, c.kubeClient, p, status); err != nil {
		return reconcile.Result{}, fmt.Errorf("patching status of placement policy %s/%s: %w", p.Namespace, p.Name, err)
	}
	log.FromContext(ctx).V(1).Info("placement policy status updated", "workloads", len(workloads), "withinQuota", status.WithinQuota)
	return reconcile.Result{RequeueAfter: resyncPeriod}, nil
}

// pools asks Capacity which NodePool serves each group; without one, every
// group counts as served.
func (c *Controller) pools(ctx context.Context, s *strategy.Strategy) ([]policy.GroupPool, error) {
	out := make([]policy.GroupPool, len(s.Groups))
	if c.capacity == nil {
		return out, nil
	}
	choices, errs, err := c.capacity.Choose(ctx, s, nil, nil, "")
	if err != nil {
		return nil, fmt.Errorf("choosing NodePools: %w", err)
	}
	for i := range out {
		out[i] = policy.GroupPool{NodePool: choices[i].PoolName(), Err: errs[i]}
	}
	return out, nil
}
