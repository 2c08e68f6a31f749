package fallback

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// deletionBuffer bounds the pods handed to the deletion controller and not
// yet in its workqueue. A pod that does not fit is not queued: its reconcile
// comes back after queueFullRetry and queues it then.
const deletionBuffer = 4096

// queueFullRetry is how soon a pod the full deletion queue did not take is
// reconciled again.
const queueFullRetry = 10 * time.Second

// Retries of a deletion the API refused: per pod, doubling from
// deletionRetryBase up to deletionRetryMax.
const (
	deletionRetryBase = time.Second
	deletionRetryMax  = time.Minute
)

// queue hands the pod to the deletion controller, whose workqueue holds
// each pod once however often it is queued before its turn. It is false when
// the queue is full.
func (c *Controller) queue(pod *corev1.Pod) bool {
	select {
	case c.deletions <- event.TypedGenericEvent[*corev1.Pod]{Object: pod}:
		return true
	default:
		log.Log.V(1).Info("deletion queue full; the pod is queued again by its next reconcile", "namespace", pod.Namespace, "name", pod.Name)
		return false
	}
}

// registerDeletion adds the deletion controller, fed by queue through a
// channel source. Its workqueue retries a refused deletion with a per-pod
// exponential backoff, and never faster than DeleteQPS; the deletions
// themselves are paced by the limiter, which spends a token only on a pod
// still stuck (a pod bound meanwhile costs none).
func (c *Controller) registerDeletion(m manager.Manager) error {
	if c.opts.DeleteQPS <= 0 {
		return nil
	}
	return controllerruntime.NewControllerManagedBy(m).
		Named(c.Name() + ".deletion").
		WatchesRawSource(c.deletionSource()).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](deletionRetryBase, deletionRetryMax),
				&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(c.opts.DeleteQPS), DeleteBurst)},
			),
		}).
		Complete(reconcile.Func(c.reconcileDeletion))
}

// deletionSource turns what queue sent into the deletion controller's
// requests.
func (c *Controller) deletionSource() source.Source {
	return source.Channel(c.deletions, handler.TypedFuncs[*corev1.Pod, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[*corev1.Pod], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
		},
	})
}

// reconcileDeletion deletes the pod if it is still a stuck pod of a key out
// of capacity that its controller will recreate: it is checked before
// waiting for the limiter and again after. A batch pod goes as batch.go
// says: a Job's pod is evicted at once when its Job ignores the eviction's
// DisruptionTarget condition; a pod whose deletion costs its owner a retry
// waits out its capacity timeout (it comes back then), and goes only if its
// owner, read afresh after the limiter, has a retry left; a batch pod that
// cannot go is kept, with an Event on its owner. An API error other than
// not-found or conflict is returned, for the workqueue to retry.
func (c *Controller) reconcileDeletion(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if c.opts.DeleteQPS <= 0 {
		return reconcile.Result{}, nil
	}
	pod := c.stuck(ctx, req.NamespacedName)
	if pod == nil {
		return reconcile.Result{}, nil
	}
	owner := batchOwner(pod)
	retry := false
	if owner != nil {
		var res *reconcile.Result
		var err error
		if retry, res, err = c.batchFirst(ctx, pod, owner); res != nil || err != nil {
			return ptr.Deref(res, reconcile.Result{}), err
		}
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return reconcile.Result{}, nil // shutting down
	}
	if pod = c.stuck(ctx, req.NamespacedName); pod == nil {
		return reconcile.Result{}, nil
	}
	key, _ := c.keyOf(pod)
	var spend *retrySpend
	if retry {
		var why string
		var err error
		if spend, why, err = c.retryBudget(ctx, pod, owner); err != nil || spend == nil {
			if why != "" {
				c.keep(ctx, pod, owner, key, keptResult(owner), why)
			}
			return reconcile.Result{}, err
		}
	}
	// The preconditions make the API refuse the deletion if the pod
	// changed since the cache saw it (bound meanwhile, or replaced).
	var err error
	if workload.Is(owner, jobGVK) {
		err = c.evict(ctx, pod)
	} else {
		err = c.kubeClient.Delete(ctx, pod, client.Preconditions{UID: &pod.UID, ResourceVersion: &pod.ResourceVersion})
	}
	switch {
	case err == nil && spend != nil:
		c.spent(ctx, pod, owner, key, spend)
	case err == nil:
		metrics.CapacityPodsDeletedTotal.WithLabelValues(resultDeleted).Inc()
		log.FromContext(ctx).Info("deleted pod stuck on a key out of capacity, for its controller to recreate elsewhere",
			"namespace", pod.Namespace, "name", pod.Name, "key", string(key), "evicted", owner != nil)
	case apierrors.IsNotFound(err):
	case apierrors.IsConflict(err):
		// Changed: its update event brings it back to Reconcile.
		log.FromContext(ctx).V(1).Info("pod changed before its deletion", "namespace", pod.Namespace, "name", pod.Name)
	case ctx.Err() != nil:
		// Stopping: the next leader looks at the pod again.
	default:
		return reconcile.Result{}, fmt.Errorf("deleting a pod stuck on key %s: %w", key, err)
	}
	return reconcile.Result{}, nil
}

// batchFirst is what a batch pod's deletion decides before the limiter,
// from what does not change: res non-nil (or an error) ends the reconcile
// (the pod kept or decided already, or to come back at the end of its
// timeout); retry says its owner's retry budget decides after the limiter.
func (c *Controller) batchFirst(ctx context.Context, pod *corev1.Pod, owner *metav1.OwnerReference) (retry bool, res *reconcile.Result, err error) {
	if c.kept.Get(pod.UID) != nil {
		return false, &reconcile.Result{}, nil // decided
	}
	action, result, why, err := c.batchVerdict(ctx, pod, owner)
	switch {
	case err != nil:
		return false, nil, err
	case action == batchKeep:
		key, _ := c.keyOf(pod)
		c.keep(ctx, pod, owner, key, result, why)
		return false, &reconcile.Result{}, nil
	case action == batchRetry:
		if wait := c.retryWait(ctx, pod); wait > 0 {
			return false, &reconcile.Result{RequeueAfter: wait}, nil
		}
		return true, nil, nil
	}
	return false, nil, nil
}

// keptResult is the metric's result for a kept pod of owner.
func keptResult(owner *metav1.OwnerReference) string {
	if workload.Is(owner, workflowGVK) {
		return resultKeptWorkflow
	}
	return resultKeptJob
}

// stuck returns the cached pod if it may be deleted now: placed by
// apportion, pending in a key that is out for every workload or for its own,
// owned by a ReplicaSet or StatefulSet (which recreate it) or a batch owner
// (reconcileDeletion decides), and not waiting for a node Karpenter is
// bringing it.
func (c *Controller) stuck(ctx context.Context, name types.NamespacedName) *corev1.Pod {
	pod := &corev1.Pod{}
	if err := c.kubeClient.Get(ctx, name, pod); err != nil {
		return nil
	}
	key, ok := c.keyOf(pod)
	if !ok || !deletable(pod) {
		return nil
	}
	info, ref := c.resolve(ctx, pod)
	out, _, _ := c.tracker.Unavailable(key)
	if !out {
		if out, _, _ = c.tracker.Unavailable(capacity.Scoped(scopeOf(pod, info), key)); !out {
			return nil
		}
	}
	if key.Kind() == capacity.KindNodePool && c.awaitingNode(ctx, pod, key.Name(), c.timeoutFor(pod, info, ref)) {
		return nil
	}
	return pod
}

// awaitingNode reports whether Karpenter is bringing the pod a node: it
// nominated the pod after its last scheduling failure, or (without a
// failure since the pod became unschedulable) a NodeClaim of the pool is on
// its way. A lookup error counts as awaiting: nothing is deleted on doubt.
func (c *Controller) awaitingNode(ctx context.Context, pod *corev1.Pod, pool string, timeout time.Duration) bool {
	now := c.clock.Now()
	pe := c.podEventsOf(pod)
	if pe.nominatedAt.After(pe.failedAt) && now.Sub(pe.nominatedAt) < timeout {
		return true
	}
	until, newest, err := c.onTheWay(ctx, pool, timeout, now)
	if err != nil {
		return true
	}
	since, _ := unschedulableSince(pod)
	failedSince := !pe.failedAt.IsZero() && !pe.failedAt.Before(since.Add(-time.Second)) && !newest.After(pe.failedAt)
	return !failedSince && until.After(now)
}
