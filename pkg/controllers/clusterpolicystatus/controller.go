// Package clusterpolicystatus is the ClusterPlacementPolicy status
// controller (leader only). For each cluster policy it asks the status
// engine (policy.Observer.ClusterStatus) for the workloads the policy
// covers, in the namespaces its selector covers, and those it places, as
// placement resolves them (workload.ResolveChain with the Source placement
// reads): the others carry their own strategy or opt out, are targeted
// (or their CronJob is) by a PlacementPolicy of their namespace, or are
// covered by a higher-ranked cluster policy. Of those it places, the
// engine counts the ones within quota (pkg/split over their Running pods
// by the labels of their nodes, those released beyond caps in no group)
// and names the first few that are not. Cluster policies of the same
// priority that cover one workload are a tie: both report it (the Conflict
// condition, and a Warning Event from here), and the oldest places the
// workload.
//
// Cost: the engine reads the caches only, and pods through the pod index
// by controller, for the covered batch workloads and the placed others: the
// status is O(covered workloads and their pods), whatever the cluster's
// other pods do. A Rollout's spec is not read (it would go to the API
// server). Reconciles come from cluster policy, namespace and workload
// events (batched: one reconcile per policy per batchDelay) and every
// resyncPeriod, never from pod events.
package clusterpolicystatus

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/policy"
)

const (
	// resyncPeriod re-reads every cluster policy, for what no watched
	// event announces.
	resyncPeriod = 30 * time.Second
	// batchDelay collects the events of a rollout into one reconcile per
	// policy.
	batchDelay = 2 * time.Second
	// tieEventInterval is how often the same tie is reported again.
	tieEventInterval = 30 * time.Minute
)

// Controller writes ClusterPlacementPolicy status.
type Controller struct {
	clock      clock.Clock
	kubeClient client.Client
	source     *policy.Source
	recorder   *events.Recorder
	kinds      []schema.GroupVersionKind
	signer     *decision.Signer // nil: no pod is recognised as released beyond caps
}

// NewController builds the controller. kubeClient is the manager's cached
// client, source the Source placement reads (WithClusterPolicies), kinds
// the workload kinds followed (their metadata informers run).
func NewController(clk clock.Clock, kubeClient client.Client, source *policy.Source, recorder *events.Recorder, kinds []schema.GroupVersionKind) *Controller {
	return &Controller{clock: clk, kubeClient: kubeClient, source: source, recorder: recorder, kinds: kinds}
}

// WithSigner recognises the pods released beyond caps by s, the placement
// controller's Signer: they count in no group, whatever their node.
func (c *Controller) WithSigner(s *decision.Signer) *Controller {
	c.signer = s
	return c
}

// Name is the controller's name in logs and metrics.
func (c *Controller) Name() string { return "clusterpolicy.status" }

// Register adds the controller to the manager (leader only, the default).
// The pod index it reads (podcache.IndexController) is added with the
// controllers, once. Every event requeues every cluster policy: they are
// few.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	b := policy.StatusController(m, c.Name(), &v1alpha1.ClusterPlacementPolicy{}).
		// Another policy's priority or selectors change this one's ties.
		Watches(&v1alpha1.ClusterPlacementPolicy{}, policy.Requeue(batchDelay, policy.GenerationChanged, c.all)).
		Watches(metadataOf(corev1.SchemeGroupVersion.WithKind("Namespace")), policy.Requeue(batchDelay, policy.LabelsChanged, c.all))
	for _, gvk := range c.kinds {
		b = b.Watches(metadataOf(gvk), policy.Requeue(batchDelay, policy.WorkloadChanged, c.all))
	}
	return b.Complete(reconcile.AsReconciler(m.GetClient(), c))
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return obj
}

// all names every cluster policy.
func (c *Controller) all(ctx context.Context, _ client.Object) ([]reconcile.Request, error) {
	all, err := c.source.ClusterPolicies(ctx)
	out := make([]reconcile.Request, len(all))
	for i, p := range all {
		out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}}
	}
	return out, err
}

// Reconcile computes one cluster policy's status and writes it when it
// changed.
func (c *Controller) Reconcile(ctx context.Context, p *v1alpha1.ClusterPlacementPolicy) (reconcile.Result, error) {
	if p.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	status, err := policy.NewObserver(c.kubeClient, c.source).WithSigner(c.signer).
		ClusterStatus(ctx, p, c.kinds, metav1.NewTime(c.clock.Now()))
	if err != nil {
		return reconcile.Result{}, err
	}
	if tie := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionConflict); tie != nil && tie.Status == metav1.ConditionTrue {
		c.recorder.Publish(events.Event{Regarding: reference(p), Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonPriorityTie, Action: "Rank",
			Message: tie.Message, DedupeValues: []string{string(p.UID), tie.Message}, DedupeTimeout: tieEventInterval})
	}
	if equality.Semantic.DeepEqual(p.Status, status) {
		return reconcile.Result{RequeueAfter: resyncPeriod}, nil
	}
	if err := policy.PatchStatus(ctx, c.kubeClient, p, status); err != nil {
		return reconcile.Result{}, fmt.Errorf("patching status of cluster placement policy %s: %w", p.Name, err)
	}
	return reconcile.Result{RequeueAfter: resyncPeriod}, nil
}

// reference is the policy as the object of an Event.
func reference(p *v1alpha1.ClusterPlacementPolicy) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.ClusterPlacementPolicyGVK.Kind, Name: p.Name, UID: p.UID}
}
