package placement

import (
	"context"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// expiryInterval is how often pending decisions are looked at: they are
// dropped only after pendingMaxAge, so a minute late costs nothing.
const expiryInterval = time.Minute

// pendingExpiry drops the tally's pending decisions that the pod informer
// never showed (the pod was deleted and its event lost), so that they stop
// counting. A periodic singleton controller, leader only as placement is.
type pendingExpiry struct {
	clock clock.Clock
	tally *Tally
}

// Name is the controller's name in logs and metrics.
func (e *pendingExpiry) Name() string { return "placement.expiry" }

// Register adds the controller to the manager.
func (e *pendingExpiry) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named(e.Name()).
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(e))
}

// Reconcile drops what expired and comes back after expiryInterval.
func (e *pendingExpiry) Reconcile(_ context.Context) (reconciler.Result, error) {
	e.tally.Expire(e.clock.Now())
	return reconciler.Result{RequeueAfter: expiryInterval}, nil
}
