package policy

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// StatusController starts the builder of a policy kind's status
// controller, named name: it reconciles a policy of kind obj when its spec
// changes (its generation), never for a write of its own status, which
// changes no generation. Its watches go through Requeue.
func StatusController(m manager.Manager, name string, obj client.Object) *builder.Builder {
	return builder.ControllerManagedBy(m).Named(name).For(obj, builder.WithPredicates(predicate.GenerationChangedPredicate{}))
}

// Requeue is the event handler the status controllers of both policy kinds
// watch through: for an object created or deleted, or updated as changed
// says, it adds the policies requests names for it, each after delay, so
// that a burst of events (a rollout's) makes one reconcile per policy.
func Requeue(delay time.Duration, changed func(o, n client.Object) bool,
	requests func(ctx context.Context, obj client.Object) ([]reconcile.Request, error)) handler.EventHandler {
	add := func(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		rs, err := requests(ctx, obj)
		if err != nil {
			log.FromContext(ctx).Error(err, "listing the policies to reconcile")
			return
		}
		for _, r := range rs {
			q.AddAfter(r, delay)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if changed(e.ObjectOld, e.ObjectNew) {
				add(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, q)
		},
	}
}

// GenerationChanged reports whether an update changed the object's spec.
func GenerationChanged(o, n client.Object) bool { return o.GetGeneration() != n.GetGeneration() }

// LabelsChanged reports whether an update changed the object's labels (a
// namespace's, which cluster policies select by).
func LabelsChanged(o, n client.Object) bool { return !labels.Equals(o.GetLabels(), n.GetLabels()) }

// WorkloadChanged reports whether an update of a workload's metadata may
// change what places it: its generation, labels or annotations.
func WorkloadChanged(o, n client.Object) bool {
	return o.GetGeneration() != n.GetGeneration() || !labels.Equals(o.GetLabels(), n.GetLabels()) || !maps.Equal(o.GetAnnotations(), n.GetAnnotations())
}

// PatchStatus writes status whole, zero values included, through the
// status subresource of obj: a merge patch computed against the old status
// would leave out a count or a bool that is 0 or false on both sides, and
// kubectl's columns would print nothing for them. An object gone is no
// error.
func PatchStatus(ctx context.Context, c client.Client, obj client.Object, status any) error {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if err := c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
