// Package policystatus is the PlacementPolicy status controller (leader
// only). For each policy it finds the targeted workloads, reads what places
// each one (its own strategy annotation, the oldest policy targeting it), the
// NodePool serving each group (capacity.Capacity, as placement chooses), and
// the Running pods by the labels of their node (those released beyond caps
// apart), and writes the status
// pkg/policy computes through the status subresource when it changed. Placement itself reads policies through policy.Source at
// admission; this controller only reports.
//
// Reads: everything comes from the manager's caches, so a reconcile sends no
// request but the status patch. Policies, workload metadata, pods and node
// metadata come from the informers placement uses; a targeted workload's
// spec.replicas and pod template annotations from the typed apps/v1 object
// (Deployment, StatefulSet, ReplicaSet; workload.ReadSpec), which the cached
// client serves from an informer of its own (list and watch on the kinds are granted for the
// metadata informers already). Argo Rollouts, which have no Go type in the
// scheme, are read as unstructured objects: the manager's client sends those
// reads to the API server. Jobs, CronJobs and Workflows are read from their
// metadata informers alone: their replicas are their live pods (a
// CronJob's, those of its Jobs), and their pods' annotations are their
// template's. Reconciles come
// from policy changes, from pod, workload and NodePool events of the
// namespace (batched: one reconcile per policy per batchDelay), and every
// resyncPeriod.
package policystatus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
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
// client (with policy.IndexPolicies registered), source the Source the
// placement controller uses.
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
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	b := controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		For(&v1alpha1.PlacementPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Pod{}, c.namespaceHandler(podChanged))
	for _, gvk := range c.opts.Kinds {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		b = b.Watches(obj, c.namespaceHandler(func(o, n client.Object) bool {
			return o.GetGeneration() != n.GetGeneration() || !labels.Equals(o.GetLabels(), n.GetLabels()) || !equalAnnotations(o, n)
		}))
	}
	if c.opts.NodePools {
		b = b.Watches(&karpv1.NodePool{}, handler.Funcs{
			CreateFunc: func(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				c.enqueue(ctx, q, "")
			},
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
					c.enqueue(ctx, q, "")
				}
			},
			DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				c.enqueue(ctx, q, "")
			},
		})
	}
	return b.Complete(reconcile.AsReconciler(m.GetClient(), c))
}

func equalAnnotations(a, b client.Object) bool {
	x, y := a.GetAnnotations(), b.GetAnnotations()
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if w, ok := y[k]; !ok || w != v {
			return false
		}
	}
	return true
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

// namespaceHandler requeues, after batchDelay, every policy of the namespace
// of an object that was created, deleted, or changed as changed says.
func (c *Controller) namespaceHandler(changed func(o, n client.Object) bool) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			c.enqueue(ctx, q, e.Object.GetNamespace())
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if changed(e.ObjectOld, e.ObjectNew) {
				c.enqueue(ctx, q, e.ObjectNew.GetNamespace())
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			c.enqueue(ctx, q, e.Object.GetNamespace())
		},
	}
}

// enqueue requeues the policies of namespace ("": of every namespace).
func (c *Controller) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], namespace string) {
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	var policies v1alpha1.PlacementPolicyList
	if err := c.kubeClient.List(ctx, &policies, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		log.FromContext(ctx).Error(err, "listing placement policies")
		return
	}
	for i := range policies.Items {
		q.AddAfter(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&policies.Items[i])}, batchDelay)
	}
}

// Reconcile computes one policy's status and writes it when it changed.
func (c *Controller) Reconcile(ctx context.Context, p *v1alpha1.PlacementPolicy) (reconcile.Result, error) {
	if p.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	tops, err := c.targets(ctx, p)
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
	pods := &podIndex{c: c, namespace: p.Namespace}
	workloads := make([]policy.Workload, 0, len(tops))
	for _, top := range tops {
		w, found, err := c.observe(ctx, p, top, pods)
		if err != nil {
			return reconcile.Result{}, err
		}
		if found {
			workloads = append(workloads, w)
		}
	}
	status := policy.Status(p, workloads, pools, metav1.NewTime(c.clock.Now()))
	if equality.Semantic.DeepEqual(p.Status, status) {
		return reconcile.Result{RequeueAfter: resyncPeriod}, nil
	}
	// The whole status, zero values included: a merge patch computed
	// against the old status would leave out a replicas count or a
	// withinQuota that is 0 or false on both sides, and kubectl would print
	// nothing for them.
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := c.kubeClient.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, body)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("patching status of placement policy %s/%s: %w", p.Namespace, p.Name, err)
	}
	log.FromContext(ctx).V(1).Info("placement policy status updated", "workloads", len(workloads), "withinQuota", status.WithinQuota)
	return reconcile.Result{RequeueAfter: resyncPeriod}, nil
}

// targets returns the metadata of the workloads the policy targets, from the
// caches. ReplicaSets that a Deployment or Rollout controls are not
// workloads of their own: placement follows them up to their owner.
func (c *Controller) targets(ctx context.Context, p *v1alpha1.PlacementPolicy) ([]*metav1.PartialObjectMetadata, error) {
	t := p.Spec.Target
	var out []*metav1.PartialObjectMetadata
	for _, gvk := range c.opts.Kinds {
		if t.Kind != "" && gvk.Kind != t.Kind {
			continue
		}
		if t.Selector == nil {
			obj := &metav1.PartialObjectMetadata{}
			obj.SetGroupVersionKind(gvk)
			if err := c.kubeClient.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: t.Name}, obj); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("getting %s %s/%s: %w", gvk.Kind, p.Namespace, t.Name, err)
			}
			obj.SetGroupVersionKind(gvk)
			if policy.Targets(p, obj) {
				out = append(out, obj)
			}
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(t.Selector)
		if err != nil || sel.Empty() {
			return nil, nil // the webhook refuses these; nothing to target
		}
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.kubeClient.List(ctx, list, client.InNamespace(p.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, fmt.Errorf("listing %s in %s: %w", gvk.Kind, p.Namespace, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			obj.SetGroupVersionKind(gvk)
			if gvk == workload.ReplicaSetGVK && metav1.GetControllerOfNoCopy(obj) != nil {
				continue
			}
			if policy.Targets(p, obj) {
				out = append(out, obj)
			}
		}
	}
	return out, nil
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

// observe reads one workload: spec.replicas and its own strategy annotation
// (metadata or pod template) from the cache, the policy that wins it, and its
// Running pods' node labels. found is false when the workload is gone.
func (c *Controller) observe(ctx context.Context, p *v1alpha1.PlacementPolicy, top *metav1.PartialObjectMetadata, pods *podIndex) (policy.Workload, bool, error) {
	gvk := top.GroupVersionKind()
	w := policy.Workload{Kind: gvk.Kind, Name: top.Name, Winner: p.Name}
	if workload.IsBatchKind(gvk) {
		return c.observeBatch(ctx, p, top, pods, w)
	}
	spec, err := workload.ReadSpec(ctx, c.kubeClient, gvk, client.ObjectKey{Namespace: p.Namespace, Name: top.Name})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return w, false, nil
		}
		return w, false, fmt.Errorf("getting %s %s/%s: %w", gvk.Kind, p.Namespace, top.Name, err)
	}
	w.Replicas = spec.Replicas
	if _, src, found := strategy.Find(spec.Annotations, spec.Template); found {
		w.Annotation = src.String()
	}
	policies, err := c.source.Policies(ctx, p.Namespace, top)
	if err != nil {
		return w, false, err
	}
	if len(policies) > 0 {
		w.Winner = policies[0].Name
	}
	if w.NodeLabels, err = pods.nodeLabels(ctx, top); err != nil {
		return w, false, err
	}
	w.BeyondCaps = pods.beyondCaps[top.UID]
	return w, true, nil
}

// observeBatch reads a Job, CronJob or Workflow from the metadata caches
// and the pod cache: its replicas are its live pods (a CronJob's, those of
// its Jobs), and its own strategy is found where placement finds it (the
// pods' annotations, which are their template's, then the Job's or
// Workflow's, then a Job's CronJob). A CronJob's Job that carries its own
// strategy, or that a policy of its own places, is not the CronJob's: its
// pods are left out of the CronJob's count.
func (c *Controller) observeBatch(ctx context.Context, p *v1alpha1.PlacementPolicy, top *metav1.PartialObjectMetadata, pods *podIndex, w policy.Workload) (policy.Workload, bool, error) {
	if err := pods.ensure(ctx); err != nil {
		return w, false, err
	}
	policies, err := c.source.Policies(ctx, p.Namespace, top)
	if err != nil {
		return w, false, err
	}
	if len(policies) > 0 {
		w.Winner = policies[0].Name
	}
	owned := []*metav1.PartialObjectMetadata{top}
	if top.GroupVersionKind() == workload.CronJobGVK {
		if _, src, found := strategy.Find(top.Annotations, nil); found {
			w.Annotation = src.String()
		}
		jobs, err := pods.jobsOf(ctx, top.UID)
		if err != nil {
			return w, false, err
		}
		owned = owned[:0]
		for _, job := range jobs {
			if pods.ownStrategy(job) != "" {
				continue
			}
			if _, placed, err := c.source.Winner(ctx, p.Namespace, job); err != nil {
				return w, false, err
			} else if placed {
				continue
			}
			owned = append(owned, job)
		}
	} else {
		w.Annotation = pods.ownStrategy(top)
		if up := metav1.GetControllerOfNoCopy(top); w.Annotation == "" && workload.Is(up, workload.CronJobGVK) {
			cron := &metav1.PartialObjectMetadata{}
			cron.SetGroupVersionKind(workload.CronJobGVK)
			if err := c.kubeClient.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: up.Name}, cron); err != nil && !apierrors.IsNotFound(err) {
				return w, false, fmt.Errorf("getting CronJob %s/%s: %w", p.Namespace, up.Name, err)
			} else if _, src, found := strategy.Find(cron.Annotations, nil); err == nil && cron.UID == up.UID && found {
				src.Owner = "CronJob " + cron.Name
				w.Annotation = src.String()
			}
		}
	}
	for _, o := range owned {
		w.Replicas += pods.live[o.UID]
		nodes, err := pods.nodeLabels(ctx, o)
		if err != nil {
			return w, false, err
		}
		w.NodeLabels = append(w.NodeLabels, nodes...)
		w.BeyondCaps += pods.beyondCaps[o.UID]
	}
	return w, true, nil
}

// podIndex groups the Running pods of one namespace by workload, listed once
// per reconcile from the pod cache, with the labels of their nodes from the
// node metadata cache.
type podIndex struct {
	c         *Controller
	namespace string
	built     bool
	byTop     map[types.UID][]string // workload UID -> nodes of its Running pods
	// beyondCaps counts, by workload UID, its Running pods released beyond
	// caps, which are in no group whatever their node (not in byTop).
	beyondCaps map[types.UID]int64
	nodes      map[string]map[string]string
	// Of a Job or Workflow (by UID): its live pods, and where the first
	// of them with a strategy of its own has it.
	live        map[types.UID]int32
	podStrategy map[types.UID]string
	// jobs maps a CronJob's UID to its Jobs, listed once when first
	// needed.
	jobs map[types.UID][]*metav1.PartialObjectMetadata
}

func (x *podIndex) ensure(ctx context.Context) error {
	if x.built {
		return nil
	}
	return x.build(ctx)
}

// ownStrategy is where a Job or Workflow has a strategy of its own: on its
// pods, else on itself ("" when it has none).
func (x *podIndex) ownStrategy(top *metav1.PartialObjectMetadata) string {
	if src := x.podStrategy[top.UID]; src != "" {
		return src
	}
	if _, src, found := strategy.Find(top.Annotations, nil); found {
		return src.String()
	}
	return ""
}

// jobsOf returns the Jobs the CronJob uid controls.
func (x *podIndex) jobsOf(ctx context.Context, uid types.UID) ([]*metav1.PartialObjectMetadata, error) {
	if x.jobs == nil {
		jobs, err := workload.JobsByCronJob(ctx, x.c.kubeClient, x.namespace)
		if err != nil {
			return nil, err
		}
		x.jobs = jobs
	}
	return x.jobs[uid], nil
}

func (x *podIndex) nodeLabels(ctx context.Context, top *metav1.PartialObjectMetadata) ([]map[string]string, error) {
	if err := x.ensure(ctx); err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, name := range x.byTop[top.UID] {
		l, ok := x.nodes[name]
		if !ok {
			node := &metav1.PartialObjectMetadata{}
			node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
			if err := x.c.kubeClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("getting node %s: %w", name, err)
			}
			l = node.Labels
			x.nodes[name] = l
		}
		out = append(out, l)
	}
	return out, nil
}

func (x *podIndex) build(ctx context.Context) error {
	x.built, x.byTop, x.beyondCaps, x.nodes = true, map[types.UID][]string{}, map[types.UID]int64{}, map[string]map[string]string{}
	x.live, x.podStrategy = map[types.UID]int32{}, map[types.UID]string{}
	var pods corev1.PodList
	if err := x.c.kubeClient.List(ctx, &pods, client.InNamespace(x.namespace)); err != nil {
		return fmt.Errorf("listing pods of %s: %w", x.namespace, err)
	}
	// ReplicaSet -> its controller (Deployment or Rollout), when it has one.
	rsOwner := map[types.UID]types.UID{}
	rsList := &metav1.PartialObjectMetadataList{}
	rsList.SetGroupVersionKind(workload.ReplicaSetGVK.GroupVersion().WithKind("ReplicaSetList"))
	if err := x.c.kubeClient.List(ctx, rsList, client.InNamespace(x.namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing replicasets of %s: %w", x.namespace, err)
	}
	for i := range rsList.Items {
		if up := metav1.GetControllerOfNoCopy(&rsList.Items[i]); up != nil {
			rsOwner[rsList.Items[i].UID] = up.UID
		}
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if owner := metav1.GetControllerOfNoCopy(pod); workload.IsBatch(pod) && workload.Live(pod) {
			// A batch workload is split over its live pods, whose
			// annotations are their template's.
			x.live[owner.UID]++
			if _, src, found := strategy.Find(nil, pod.Annotations); found && x.podStrategy[owner.UID] == "" {
				x.podStrategy[owner.UID] = src.String()
			}
		}
		if pod.Status.Phase != corev1.PodRunning || !podutil.IsScheduled(pod) || podutil.IsTerminating(pod) {
			continue
		}
		owner := metav1.GetControllerOfNoCopy(pod)
		if owner == nil {
			continue
		}
		uid := owner.UID
		if workload.Is(owner, workload.ReplicaSetGVK) {
			if up, ok := rsOwner[uid]; ok {
				uid = up
			}
		}
		if x.c.opts.Signer.BeyondCaps(pod) {
			x.beyondCaps[uid]++
			continue
		}
		x.byTop[uid] = append(x.byTop[uid], pod.Spec.NodeName)
	}
	return nil
}
