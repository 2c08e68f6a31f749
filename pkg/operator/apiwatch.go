package operator

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// APIWatch is the one place that says which APIs apportion adapts to at
// start, and it ends the process when one of them appears or goes away: the
// NodePool API (Karpenter mode or node-label mode) and the workload kinds
// (Argo Rollouts followed or not). The Deployment then
// restarts apportion, which adapts to the cluster as it is, so installing
// Karpenter or Argo Rollouts after apportion needs no manual restart. It
// runs on every replica and reads discovery once per interval, never on the
// admission or placement path.
type APIWatch struct {
	discovery discovery.DiscoveryInterface
	interval  time.Duration
	served    map[schema.GroupVersionKind]bool // as apportion found them at start
}

// NewAPIWatch records whether each kind is served now.
func NewAPIWatch(d discovery.DiscoveryInterface, interval time.Duration, kinds ...schema.GroupVersionKind) (*APIWatch, error) {
	w := &APIWatch{discovery: d, interval: interval, served: map[schema.GroupVersionKind]bool{}}
	lists := map[schema.GroupVersion][]metav1.APIResource{}
	for _, gvk := range kinds {
		ok, err := w.isServed(gvk, lists)
		if err != nil {
			return nil, fmt.Errorf("discovering %s: %w", gvk.Kind, err)
		}
		w.served[gvk] = ok
	}
	return w, nil
}

// Served says whether kind was served at start.
func (w *APIWatch) Served(gvk schema.GroupVersionKind) bool { return w.served[gvk] }

// isServed reads the group version's resources once per round (lists holds
// what this round has read).
func (w *APIWatch) isServed(gvk schema.GroupVersionKind, lists map[schema.GroupVersion][]metav1.APIResource) (bool, error) {
	resources, ok := lists[gvk.GroupVersion()]
	if !ok {
		list, err := w.discovery.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, err
		default:
			resources = list.APIResources
		}
		lists[gvk.GroupVersion()] = resources
	}
	for _, r := range resources {
		if r.Kind == gvk.Kind {
			return true, nil
		}
	}
	return false, nil
}

// Check returns an error naming the first kind whose presence changed since
// start. A discovery error is logged and treated as no change.
func (w *APIWatch) Check(ctx context.Context) error {
	lists := map[schema.GroupVersion][]metav1.APIResource{}
	for gvk, was := range w.served {
		now, err := w.isServed(gvk, lists)
		if err != nil {
			log.FromContext(ctx).V(1).Info("discovery failed; checking again later", "kind", gvk.Kind, "error", err.Error())
			continue
		}
		if now != was {
			change := "is now served"
			if was {
				change = "is no longer served"
			}
			return fmt.Errorf("the %s API (%s) %s; exiting so that the restart adapts to it", gvk.Kind, gvk.GroupVersion(), change)
		}
	}
	return nil
}

// Start checks every interval until ctx ends or a kind changes; a change
// stops the manager with that error.
func (w *APIWatch) Start(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := w.Check(ctx); err != nil {
				return err
			}
		}
	}
}

// NeedLeaderElection is false: every replica must restart.
func (w *APIWatch) NeedLeaderElection() bool { return false }
