package placement

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/podcache"
)

// PodStore is where a request's pod is read: the pod informer's store
// (a toolscache.Store), keyed namespace/name, holding podcache.Pods.
type PodStore interface {
	GetByKey(key string) (item any, exists bool, err error)
}

// ViewReconciler is rec as a reconcile.Reconciler, like
// reconcile.AsReconciler, but each request's pod is read from store and
// handed to rec as podcache.View gives it: shared with the cache and every
// other reader, so rec must not change it. The cache reader's Get would
// expand the compact pod and deep-copy it at every reconcile, a tenth of the
// leader's CPU in a burst. A pod not in the store is gone: nothing to do, as
// for a Get that finds none.
func ViewReconciler(store PodStore, rec reconcile.ObjectReconciler[*corev1.Pod]) reconcile.Reconciler {
	return &viewReconciler{store: store, rec: rec}
}

type viewReconciler struct {
	store PodStore
	rec   reconcile.ObjectReconciler[*corev1.Pod]
}

func (r *viewReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj, ok, err := r.store.GetByKey(req.Namespace + "/" + req.Name)
	if err != nil || !ok {
		return reconcile.Result{}, err
	}
	pod, ok := podcache.View(obj)
	if !ok {
		return reconcile.Result{}, fmt.Errorf("the pod cache holds a %T for %s", obj, req)
	}
	return r.rec.Reconcile(ctx, pod)
}

// reconciler is the controller as the manager runs it: reading each pod
// from the pod informer's store when the manager's cache gives one (a cache
// restricted to some namespaces does not), through the client otherwise.
func (c *Controller) reconciler(ctx context.Context, m manager.Manager) (reconcile.Reconciler, error) {
	store, err := podcache.Indexer(ctx, m.GetCache())
	if err != nil {
		return nil, err
	}
	if store != nil {
		return ViewReconciler(store, c), nil
	}
	log.FromContext(ctx).Info("the pod informer has no store: the placement controller reads each pod through the client")
	return reconcile.AsReconciler(m.GetClient(), c), nil
}
