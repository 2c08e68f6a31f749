package placement

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/podcache"
)

// imageWarmer inspects the images of gated pods on the replicas that do not
// lead, so that the one that takes over after the leader dies finds them in
// its image cache: its first decisions would otherwise wait for the
// registry, up to --image-timeout, while the pods the old leader left keep
// waiting. The leader skips it (placement inspects the same images), so a
// registry sees each image once per replica per cache lifetime. Results and
// failures are the image cache's; placement reports them.
type imageWarmer struct {
	images  Images
	wait    time.Duration
	elected <-chan struct{}
}

// Name is the controller's name in logs and metrics.
func (w *imageWarmer) Name() string { return "placement.images" }

// Register adds the warmer; it runs on every replica.
func (w *imageWarmer) Register(_ context.Context, m manager.Manager) error {
	w.elected = m.Elected()
	return controllerruntime.NewControllerManagedBy(m).
		Named(w.Name()).
		Watches(&corev1.Pod{}, oldestFirst{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			gates, ok := podcache.Gates(o)
			return ok && decision.GatedBy(gates) && !w.leading()
		}))).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 2}).
		Complete(reconcile.AsReconciler(m.GetClient(), w))
}

// leading reports whether this replica leads: then placement inspects the
// images, and the leader's pod events are not even queued here.
func (w *imageWarmer) leading() bool {
	select {
	case <-w.elected:
		return true
	default:
		return false
	}
}

// Reconcile inspects the pod's images, unless this replica leads.
func (w *imageWarmer) Reconcile(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	if w.leading() || !decision.HasGate(pod) {
		return reconcile.Result{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, w.wait)
	defer cancel()
	_, _ = w.images.Pod(ctx, pod) // cached either way; placement reports failures
	return reconcile.Result{}, nil
}
