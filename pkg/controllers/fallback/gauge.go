package fallback

import (
	"context"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

// gaugeInterval is how often apportion_capacity_unavailable is recounted:
// outages end by expiring, with no event to react to.
const gaugeInterval = 10 * time.Second

// gauge keeps apportion_capacity_unavailable current as outages begin and
// end: a periodic singleton controller, leader only as the detector is.
type gauge struct{ c *Controller }

func (g gauge) register(m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named(g.c.Name() + ".gauge").
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(g))
}

// Reconcile recounts the outages and comes back after gaugeInterval.
func (g gauge) Reconcile(context.Context) (reconciler.Result, error) {
	g.c.updateGauge()
	return reconciler.Result{RequeueAfter: gaugeInterval}, nil
}

func (c *Controller) updateGauge() {
	type kindScope struct{ kind, scope string }
	counts := map[kindScope]float64{}
	for _, kind := range []string{capacity.KindNodePool, capacity.KindLabels} {
		counts[kindScope{kind, "cluster"}], counts[kindScope{kind, "workload"}] = 0, 0
	}
	for k := range c.tracker.Snapshot() {
		scope := "cluster"
		if k.Scope() != "" {
			scope = "workload"
		}
		counts[kindScope{k.Kind(), scope}]++
	}
	for ks, n := range counts {
		metrics.CapacityUnavailable.WithLabelValues(ks.kind, ks.scope).Set(n)
	}
}
