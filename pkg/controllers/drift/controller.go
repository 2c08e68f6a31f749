// Package drift is the drift controller (leader only): it makes loud a
// workload that runs off its strategy. Today a group that no NodePool can
// serve (a typo, a tainted pool without the apportion.dev/tolerate opt-in, a
// pool out of capacity) is left out at decision time with one
// GroupUnavailable Event, and the other groups take its share for as long
// as it lasts.
//
// Every sweepPeriod it looks at every workload apportion places by strategy
// (its annotation or a PlacementPolicy, resolved as the placement
// controller resolves its pods), among the live pods of the manager's pod
// cache, grouped by workload UID. The pods are read by controller (a
// ReplicaSet, a StatefulSet, a Job, a Workflow, from the metadata caches)
// through the pod index by controller: one pod to resolve the workload,
// all of them only when it is placed; the pods of nothing apportion
// follows are not read. Workloads without a strategy, opted out with
// apportion.dev/skip, or with an invalid strategy are not looked at
// (placed says which are). For each it computes split.Compute over its
// spec.replicas (workload.ReadSpec), the labels of the nodes of its Running
// pods (node metadata from the cache; the pods released beyond caps, whose
// signed decision says so, in no group), and the groups left out now (the
// per-group errors of capacity.Capacity.Choose for one of its pods, without
// the node affinity its decision added). It drifts when split.Drifting:
// outside quota at the Running count, pods on nodes of no group, or a group
// left out.
//
// Rollouts are not drift. A sweep counts (as drifting or as back within
// quota) only when the workload is settled: every live pod is Running,
// bound and not terminating, all of one revision, and there are as many as
// spec.replicas. Any other sweep is no evidence either way: it neither
// starts, nor ends, nor crosses the threshold of a drift, so a rolling
// update in the middle of a drift neither hides nor restarts it. A
// workload with a pod Pending for good never settles; the capacity fallback
// and its alerts are about that.
//
// Once a workload has drifted over settled sweeps for longer than
// --drift-after, the controller records a Warning Event SplitDrift on it
// (at most one an hour while the drift keeps the same kind: the same groups
// left out, outside quota or not, pods outside every group or not) with
// the numbers (split.Describe) and how long, logs one line, and sets
// apportion_workload_drift to 1. When it is back within quota after such an
// Event, a Normal Event SplitRestored. apportion_workload_pods exports the
// desired and running pods of every group, apportion_workloads_drifting
// the count; the per-workload series are capped (metrics.Workloads) and
// deleted when the workload is gone or no longer placed.
//
// Trust: it reads only caches (and Argo Rollouts through the manager's
// client) and records Events and metrics about workloads that opted in; it
// never writes a pod.
package drift

import (
	"context"
	"time"

	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const (
	// sweepPeriod is how often every workload is looked at: drift is a
	// matter of minutes, and a sweep reads only caches.
	sweepPeriod = 30 * time.Second
	// eventInterval is the least time between two SplitDrift Events of one
	// workload while its drift keeps the same kind.
	eventInterval = time.Hour
)

// Event reasons.
const (
	ReasonSplitDrift    = "SplitDrift"
	ReasonSplitRestored = "SplitRestored"
)

// Options configure the controller.
type Options struct {
	// After is --drift-after: how long a workload drifts before the
	// SplitDrift Event and apportion_workload_drift 1; 0 turns both off.
	After time.Duration
	// Resolve are the options the placement controller resolves
	// workloads with (PlacementPolicies, when their CRD is installed).
	Resolve []workload.Option
	// Strategies compiles strategies, shared with the other controllers;
	// nil: a cache of its own.
	Strategies *compiled.Cache
	// Exported caps the workloads with series of their own; nil:
	// metrics.Workloads.
	Exported *metrics.Capped
	// Controllers are the kinds of pod controllers read, those of
	// Controllers the API server serves (their metadata informers run);
	// nil: ReplicaSets, StatefulSets and Jobs, which every cluster serves.
	Controllers []schema.GroupVersionKind
	// Signer recognises the pods released beyond caps (the placement
	// controller's): they count in no group, whatever their node. nil:
	// none is recognised, and every Running pod counts by its node.
	Signer *decision.Signer
}

// Controllers are the kinds that control the pods of the workloads
// apportion follows: a Deployment's or Rollout's ReplicaSets, a
// StatefulSet, a Job (a CronJob's too), an Argo Workflow.
var Controllers = []schema.GroupVersionKind{workload.ReplicaSetGVK, workload.StatefulSetGVK, workload.JobGVK, workload.WorkflowGVK}

// Controller watches workloads for drift.
type Controller struct {
	clock    clock.Clock
	kube     client.Client
	recorder *apevents.Recorder
	capacity capacity.Capacity
	opts     Options
	// tracked is what the last sweeps saw of each placed workload, by UID;
	// only the sweep (one at a time, from the singleton) touches it.
	tracked map[types.UID]*tracked
}

// NewController builds the controller. kube is the manager's cached client,
// groupCapacity the Capacity the placement controller chooses with.
func NewController(clk clock.Clock, kube client.Client, recorder *apevents.Recorder, groupCapacity capacity.Capacity, opts Options) *Controller {
	if opts.Strategies == nil {
		opts.Strategies = compiled.NewCache(compiled.DefaultSize)
	}
	if opts.Exported == nil {
		opts.Exported = metrics.Workloads
	}
	if opts.Controllers == nil {
		opts.Controllers = []schema.GroupVersionKind{workload.ReplicaSetGVK, workload.StatefulSetGVK, workload.JobGVK}
	}
	return &Controller{clock: clk, kube: kube, recorder: recorder, capacity: groupCapacity, opts: opts,
		tracked: map[types.UID]*tracked{}}
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "drift" }

// Register adds the controller to the manager: a periodic singleton, leader
// only (the default).
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(c))
}

// Reconcile sweeps every workload and comes back after sweepPeriod. A
// failed sweep is logged and retried at the next period: nothing waits on
// it.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	if err := c.Sweep(ctx); err != nil {
		log.FromContext(ctx).Error(err, "drift sweep failed")
	}
	return reconciler.Result{RequeueAfter: sweepPeriod}, nil
}
