package fallback

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/podcache"
)

// Register adds the indexes, the pod controller (with the NodePool,
// NodeClaim and Karpenter Event watches in Karpenter mode), the NodePool
// outage controller, the deletion controller and the gauge to the manager; all
// run on the elected leader only. In Karpenter mode the manager's cache must
// hold core Events (the operator narrows it to Karpenter's).
func (c *Controller) Register(ctx context.Context, m manager.Manager) error {
	if err := c.indexPods(ctx, m.GetCache()); err != nil {
		return err
	}
	if err := c.registerDeletion(m); err != nil {
		return err
	}
	if err := (gauge{c}).register(m); err != nil {
		return err
	}
	b := controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			pod, ok := podcache.View(o)
			return ok && c.watched(pod)
		}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2})
	if c.opts.NodeLabels {
		return b.Complete(reconcile.AsReconciler(m.GetClient(), c))
	}
	if err := m.GetFieldIndexer().IndexField(ctx, &karpv1.NodeClaim{}, ClaimOnTheWayIndex, claimIndex); err != nil {
		return fmt.Errorf("indexing NodeClaims: %w", err)
	}
	b = b.Watches(&karpv1.NodePool{}, c.nodePoolHandler()).
		Watches(&karpv1.NodeClaim{}, c.nodeClaimHandler()).
		Watches(&corev1.Event{}, c.eventHandler())
	if err := b.Complete(reconcile.AsReconciler(m.GetClient(), c)); err != nil {
		return err
	}
	return controllerruntime.NewControllerManagedBy(m).
		Named(c.Name() + ".nodepool").
		For(&karpv1.NodePool{}).
		WatchesRawSource(source.Channel(c.rechecks, &handler.EnqueueRequestForObject{})).
		Complete(reconcile.Func(c.ReconcilePool))
}

// The name controller-runtime gives PodKeyIndex in the pod informer's
// indexer, and the prefix of a value indexed for every namespace (its
// IndexField; the fallback tests read them through its cache).
const (
	podKeyIndexName = "field:" + PodKeyIndex
	allNamespaces   = "__all_namespaces/"
)

// indexPods adds PodKeyIndex to the pod informer, and keeps its indexer for
// enqueuePool.
func (c *Controller) indexPods(ctx context.Context, informers cache.Cache) error {
	if err := informers.IndexField(ctx, &corev1.Pod{}, PodKeyIndex, c.podIndex); err != nil {
		return fmt.Errorf("indexing pods by capacity key: %w", err)
	}
	indexer, err := podcache.Indexer(ctx, informers)
	if err != nil {
		return err
	}
	// Should controller-runtime store or name the index otherwise, the
	// pods are listed through the cache: slower, not wrong.
	if indexer != nil {
		if _, ok := indexer.GetIndexers()[podKeyIndexName]; ok {
			c.podIndexer = indexer
			return nil
		}
	}
	log.FromContext(ctx).Info("the pod informer's index by capacity key is not readable; a NodePool's pending pods are listed through the cache")
	return nil
}

// poolEvent asks the NodePool outage controller to look at a pool.
type poolEvent = event.GenericEvent

// enqueuePool asks for the evaluation of every pending pod of a NodePool.
// Only the pods' keys are needed: they are read from the informer's index,
// where a List would copy every pod of the pool (a whole burst's worth when
// a NodePool goes bad).
func (c *Controller) enqueuePool(ctx context.Context, pool string, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if pool == "" {
		return
	}
	if c.podIndexer != nil {
		// The stored pods themselves, never changed: only their keys are
		// read (ByIndex, unlike IndexKeys, does not sort them).
		objs, err := c.podIndexer.ByIndex(podKeyIndexName, allNamespaces+string(capacity.PoolKey(pool)))
		if err != nil {
			log.FromContext(ctx).Error(err, "reading the pending pods of a NodePool", "nodepool", pool)
			return
		}
		for _, o := range objs {
			if pod, ok := o.(metav1.Object); ok {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.GetNamespace(), Name: pod.GetName()}})
			}
		}
		return
	}
	var pods corev1.PodList
	if err := c.kubeClient.List(ctx, &pods, client.MatchingFields{PodKeyIndex: string(capacity.PoolKey(pool))}); err != nil {
		log.FromContext(ctx).Error(err, "listing the pending pods of a NodePool", "nodepool", pool)
		return
	}
	for i := range pods.Items {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pods.Items[i])})
	}
}

func (c *Controller) nodePoolHandler() handler.EventHandler {
	bad := func(o client.Object) bool {
		np, ok := o.(*karpv1.NodePool)
		if !ok {
			return false
		}
		_, b := poolState(np)
		return b
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if bad(e.Object) {
				c.enqueuePool(ctx, e.Object.GetName(), q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if bad(e.ObjectNew) && !bad(e.ObjectOld) {
				c.enqueuePool(ctx, e.ObjectNew.GetName(), q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			c.enqueuePool(ctx, e.Object.GetName(), q)
		},
	}
}

func (c *Controller) nodeClaimHandler() handler.EventHandler {
	pool := func(o client.Object) string { return o.GetLabels()[karpv1.NodePoolLabelKey] }
	onTheWay := func(o client.Object) bool { return len(claimIndex(o)) > 0 }
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if nc, ok := e.Object.(*karpv1.NodeClaim); ok && c.observeClaim(nc, false) {
				c.enqueuePool(ctx, pool(nc), q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			nc, ok := e.ObjectNew.(*karpv1.NodeClaim)
			if !ok {
				return
			}
			// A new failure, or a NodeClaim no longer on its way (it
			// registered, or is going away): the pods may now be stuck.
			if c.observeClaim(nc, false) || (onTheWay(e.ObjectOld) && !onTheWay(nc)) {
				c.enqueuePool(ctx, pool(nc), q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if nc, ok := e.Object.(*karpv1.NodeClaim); ok {
				c.observeClaim(nc, true)
				c.enqueuePool(ctx, pool(nc), q)
			}
		},
	}
}

// eventHandler reads Karpenter's Events: a pod's scheduling failure or
// nomination brings that pod back; a NodePool's NoCompatibleInstanceTypes
// brings back the pool's pending pods.
func (c *Controller) eventHandler() handler.EventHandler {
	observe := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		ev, ok := o.(*corev1.Event)
		if !ok {
			return
		}
		pod, pool := c.ObserveEvent(ev)
		if pod.Name != "" {
			q.Add(reconcile.Request{NamespacedName: pod})
		}
		c.enqueuePool(ctx, pool, q)
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			observe(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			observe(ctx, e.ObjectNew, q)
		},
	}
}
