// Package clusterpolicystatus is the ClusterPlacementPolicy status
// controller (leader only). For each cluster policy it walks the namespaces
// its selector covers and their workloads of the followed kinds, from the
// metadata caches, and counts the workloads it covers and those it places:
// the others carry their own strategy, are targeted by a PlacementPolicy of
// their namespace, are covered by a higher-ranked cluster policy, or opted
// out. Of the workloads it places, it counts those within quota (pkg/split,
// over their Running pods by the labels of their nodes, those released
// beyond caps in no group) and names the first
// few that are not. A Job, CronJob or Workflow is split over its live pods
// (a CronJob over those of its Jobs that nothing of their own places), and
// its own strategy is found where placement finds it: on its pods (their
// template's annotations), on itself, on a Job's CronJob. Cluster policies
// of the same priority that cover one workload are a tie: both report it
// (the Conflict condition and a Warning Event), and the oldest places the
// workload.
//
// Cost: one list of namespaces and of cluster policies, and one list per
// covered namespace and kind, per reconcile; per covered workload, the
// index reads of its namespace's PlacementPolicies and the cached typed
// object for its pod template's annotations; per placed workload, its pods
// through the pod cache's index by controller (one read per ReplicaSet or
// StatefulSet, Job or Workflow; a CronJob's Jobs from one list of the
// namespace's Job metadata) and its nodes' metadata. No other pod is read:
// the status is O(covered workloads and their pods), whatever the
// cluster's other pods do. Reconciles come from cluster policy, namespace and workload events
// (batched: one reconcile per policy per batchDelay) and every
// resyncPeriod, never from pod events.
package clusterpolicystatus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/split"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const (
	// resyncPeriod re-reads every cluster policy, for what no watched
	// event announces.
	resyncPeriod = 30 * time.Second
	// batchDelay collects the events of a rollout into one reconcile per
	// policy.
	batchDelay = 2 * time.Second
	// maxConflicts bounds the policies named in status.conflicts.
	maxConflicts = 10
	// maxOffStrategy bounds the workloads named in status.offStrategy.
	maxOffStrategy = 10
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
// controllers, once.
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	changed := func(o, n client.Object) bool {
		return o.GetGeneration() != n.GetGeneration() || !labels.Equals(o.GetLabels(), n.GetLabels()) || !equalAnnotations(o, n)
	}
	b := controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		For(&v1alpha1.ClusterPlacementPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Another policy's priority or selectors change this one's ties.
		Watches(&v1alpha1.ClusterPlacementPolicy{}, c.allHandler(func(o, n client.Object) bool { return o.GetGeneration() != n.GetGeneration() })).
		Watches(metadataOf(corev1.SchemeGroupVersion.WithKind("Namespace")), c.allHandler(func(o, n client.Object) bool { return !labels.Equals(o.GetLabels(), n.GetLabels()) }))
	for _, gvk := range c.kinds {
		b = b.Watches(metadataOf(gvk), c.allHandler(changed))
	}
	return b.Complete(reconcile.AsReconciler(m.GetClient(), c))
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return obj
}

func equalAnnotations(a, b client.Object) bool {
	x, y := a.GetAnnotations(), b.GetAnnotations()
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if w, ok := y[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// allHandler requeues every cluster policy, after batchDelay, for an object
// created, deleted, or changed as changed says. Cluster policies are few.
func (c *Controller) allHandler(changed func(o, n client.Object) bool) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			c.enqueue(ctx, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if changed(e.ObjectOld, e.ObjectNew) {
				c.enqueue(ctx, q)
			}
		},
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			c.enqueue(ctx, q)
		},
	}
}

func (c *Controller) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	all, err := c.source.ClusterPolicies(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "listing cluster placement policies")
		return
	}
	for _, p := range all {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}}, batchDelay)
	}
}

// observed is what one reconcile found.
type observed struct {
	namespaces, matched, placed, within int32
	// off: "namespace/kind/name: reason" of every placed workload not
	// within quota.
	off []string
	// tied: the names of the policies of the same priority that cover
	// some of the same workloads, and one such workload.
	tied    map[string]bool
	tiedOn  string
	tiedFor int
}

// Reconcile computes one cluster policy's status and writes it when it
// changed.
func (c *Controller) Reconcile(ctx context.Context, p *v1alpha1.ClusterPlacementPolicy) (reconcile.Result, error) {
	if p.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	o, err := c.observe(ctx, p)
	if err != nil {
		return reconcile.Result{}, err
	}
	raw, serr := policy.ClusterStrategy(&p.Spec)
	status := v1alpha1.ClusterPlacementPolicyStatus{
		ObservedGeneration: p.Generation, Strategy: raw,
		Matched: o.matched, Placed: o.placed, WithinQuota: o.within, Namespaces: o.namespaces,
		Conditions: slices.Clone(p.Status.Conditions),
	}
	for name := range o.tied {
		status.Conflicts = append(status.Conflicts, name)
	}
	slices.Sort(status.Conflicts)
	if len(status.Conflicts) > maxConflicts {
		status.Conflicts = status.Conflicts[:maxConflicts]
	}
	slices.Sort(o.off)
	status.OffStrategy = o.off[:min(len(o.off), maxOffStrategy)]
	now := metav1.NewTime(c.clock.Now())
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: p.Generation, LastTransitionTime: now}
	switch {
	case serr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonInvalidStrategy, serr.Error()
	case o.placed > 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, v1alpha1.ReasonApplied, fmt.Sprintf("places %d of the %d workloads it covers in %d namespaces", o.placed, o.matched, o.namespaces)
	default:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonNoWorkload, fmt.Sprintf("places none of the %d workloads it covers in %d namespaces", o.matched, o.namespaces)
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	conflict := metav1.Condition{Type: v1alpha1.ConditionConflict, ObservedGeneration: p.Generation, LastTransitionTime: now,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoConflict, Message: "no cluster policy of the same priority covers its workloads"}
	if len(o.tied) > 0 {
		conflict.Status, conflict.Reason = metav1.ConditionTrue, v1alpha1.ReasonPriorityTie
		conflict.Message = tieMessage(p, status.Conflicts, o)
		c.recorder.Publish(events.Event{Regarding: reference(p), Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonPriorityTie, Action: "Rank",
			Message: conflict.Message, DedupeValues: []string{string(p.UID), conflict.Message}, DedupeTimeout: tieEventInterval})
	}
	meta.SetStatusCondition(&status.Conditions, conflict)
	if equality.Semantic.DeepEqual(p.Status, status) {
		return reconcile.Result{RequeueAfter: resyncPeriod}, nil
	}
	// The whole status, zero values included, for kubectl's columns.
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := c.kubeClient.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, body)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("patching status of cluster placement policy %s: %w", p.Name, err)
	}
	return reconcile.Result{RequeueAfter: resyncPeriod}, nil
}

func tieMessage(p *v1alpha1.ClusterPlacementPolicy, names []string, o observed) string {
	return fmt.Sprintf("priority %d ties with %s on %d workloads (e.g. %s); the oldest policy, then the first by name, places them",
		p.Spec.Priority, strings.Join(names, ", "), o.tiedFor, o.tiedOn)
}

// reference is the policy as the object of an Event.
func reference(p *v1alpha1.ClusterPlacementPolicy) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.ClusterPlacementPolicyGVK.Kind, Name: p.Name, UID: p.UID}
}

// observe walks the namespaces the policy covers and their workloads.
func (c *Controller) observe(ctx context.Context, p *v1alpha1.ClusterPlacementPolicy) (observed, error) {
	o := observed{tied: map[string]bool{}}
	all, err := c.source.ClusterPolicies(ctx)
	if err != nil {
		return o, err
	}
	// An invalid strategy places nothing: its workloads have no split.
	var cs *compiled.Strategy
	if raw, err := policy.ClusterStrategy(&p.Spec); err == nil {
		cs, _ = compiled.Parse(raw)
	}
	pods := &podReader{c: c, strategy: cs, nodes: map[string]map[string]string{}}
	nsList := &metav1.PartialObjectMetadataList{}
	nsList.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := c.kubeClient.List(ctx, nsList, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("listing namespaces: %w", err)
	}
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		if !c.source.SelectsNamespace(p, ns) {
			continue
		}
		o.namespaces++
		pods.namespace, pods.replicaSets, pods.jobs = ns.Name, nil, nil
		for _, gvk := range c.kinds {
			if len(p.Spec.Target.Kinds) > 0 && !slices.Contains(p.Spec.Target.Kinds, gvk.Kind) {
				continue
			}
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err := c.kubeClient.List(ctx, list, client.InNamespace(ns.Name), client.UnsafeDisableDeepCopy); err != nil {
				return o, fmt.Errorf("listing %s in %s: %w", gvk.Kind, ns.Name, err)
			}
			for j := range list.Items {
				top := list.Items[j].DeepCopy()
				top.SetGroupVersionKind(gvk)
				// A ReplicaSet a Deployment or Rollout controls is
				// placed as its owner.
				if gvk == workload.ReplicaSetGVK && metav1.GetControllerOfNoCopy(top) != nil {
					continue
				}
				if !c.source.Covers(p, ns, top) {
					continue
				}
				if err := c.count(ctx, p, all, ns, top, pods, &o); err != nil {
					return o, err
				}
			}
		}
	}
	return o, nil
}

// count adds one covered workload: who places it, and the ties on it.
func (c *Controller) count(ctx context.Context, p *v1alpha1.ClusterPlacementPolicy, all []*v1alpha1.ClusterPlacementPolicy, ns, top *metav1.PartialObjectMetadata, pods *podReader, o *observed) error {
	o.matched++
	var ranked []*v1alpha1.ClusterPlacementPolicy
	for _, q := range all {
		if q.UID == p.UID || c.source.Covers(q, ns, top) {
			ranked = append(ranked, q)
		}
	}
	slices.SortFunc(ranked, policy.Ranked)
	o.ties(p, ranked, ns, top)
	if len(ranked) == 0 || ranked[0].UID != p.UID {
		return nil
	}
	var (
		places   bool
		replicas int64
		batch    []types.UID
		err      error
	)
	if workload.IsBatchKind(top.GroupVersionKind()) {
		places, batch, err = c.placesBatch(ctx, p, ns, top, pods)
	} else {
		places, replicas, err = c.places(ctx, p, ns, top)
	}
	if err != nil || !places {
		return err
	}
	o.placed++
	if pods.strategy == nil {
		return nil
	}
	var sp split.Split
	if batch != nil {
		sp, err = pods.splitBatch(ctx, top, batch)
	} else {
		sp, err = pods.split(ctx, top, replicas)
	}
	if err != nil {
		return err
	}
	if sp.WithinQuota {
		o.within++
	} else {
		o.off = append(o.off, ns.Name+"/"+top.Kind+"/"+top.Name+": "+offReason(sp))
	}
	return nil
}

// ties records the policies of p's priority that cover top with p, when
// that priority is the highest there: the tie decides who places top.
func (o *observed) ties(p *v1alpha1.ClusterPlacementPolicy, ranked []*v1alpha1.ClusterPlacementPolicy, ns, top *metav1.PartialObjectMetadata) {
	if len(ranked) == 0 || ranked[0].Spec.Priority != p.Spec.Priority {
		return
	}
	tiedHere := false
	for _, q := range ranked {
		if q.UID != p.UID && q.Spec.Priority == p.Spec.Priority {
			o.tied[q.Name] = true
			tiedHere = true
		}
	}
	if tiedHere {
		o.tiedFor++
		if o.tiedOn == "" {
			o.tiedOn = top.Kind + " " + ns.Name + "/" + top.Name
		}
	}
}

// places reports whether p, the highest-ranked cluster policy covering top,
// places it: top carries no strategy of its own, no PlacementPolicy targets
// it, and it did not opt out (or p does not allow that).
// replicas is its spec.replicas, read for the apps/v1 kinds only (0 for
// the others: the split at the Running count needs none).
func (c *Controller) places(ctx context.Context, p *v1alpha1.ClusterPlacementPolicy, ns, top *metav1.PartialObjectMetadata) (places bool, replicas int64, err error) {
	template := map[string]string(nil)
	if top.GroupVersionKind().Group == workload.DeploymentGVK.Group {
		spec, err := workload.ReadSpec(ctx, c.kubeClient, top.GroupVersionKind(), client.ObjectKeyFromObject(top))
		if err != nil && !apierrors.IsNotFound(err) {
			return false, 0, err
		}
		template, replicas = spec.Template, int64(spec.Replicas)
	}
	if _, _, own := strategy.Find(top.Annotations, template); own {
		return false, 0, nil
	}
	namespaced, err := c.source.Policies(ctx, ns.Name, top)
	if err != nil || len(namespaced) > 0 {
		return false, 0, err
	}
	skip := isTrue(top.Annotations[annotations.Skip]) || isTrue(template[annotations.Skip])
	return !skip || !p.SkipAllowed(), replicas, nil
}

// placesBatch is places for a Job, CronJob or Workflow, whose own
// strategy is found where placement finds it: on its live pods (their
// template's annotations), on the Job or Workflow, on a Job's CronJob.
// owned are the Jobs or Workflow whose live pods the split counts: the Job
// or Workflow itself, or the CronJob's Jobs that nothing of their own
// places (no strategy on them or their pods, no policy covering them, not
// opted out).
func (c *Controller) placesBatch(ctx context.Context, p *v1alpha1.ClusterPlacementPolicy, ns, top *metav1.PartialObjectMetadata, pods *podReader) (places bool, owned []types.UID, err error) {
	levels := []map[string]string{top.Annotations}
	if top.GroupVersionKind() == workload.CronJobGVK {
		jobs, err := pods.jobsOf(ctx, top.UID)
		if err != nil {
			return false, nil, err
		}
		owned = []types.UID{}
		for _, job := range jobs {
			own, err := pods.batchAnnotations(ctx, job)
			if err != nil {
				return false, nil, err
			}
			if hasStrategy(own) || anyTrue(annotations.Skip, own) {
				continue
			}
			if _, placed, err := c.source.Winner(ctx, ns.Name, job); err != nil {
				return false, nil, err
			} else if placed {
				continue
			}
			owned = append(owned, job.UID)
		}
	} else {
		if levels, err = pods.batchAnnotations(ctx, top); err != nil {
			return false, nil, err
		}
		if up := metav1.GetControllerOfNoCopy(top); workload.Is(up, workload.CronJobGVK) {
			cron := metadataOf(workload.CronJobGVK)
			if err := c.kubeClient.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: up.Name}, cron); err != nil && !apierrors.IsNotFound(err) {
				return false, nil, fmt.Errorf("getting CronJob %s/%s: %w", ns.Name, up.Name, err)
			} else if err == nil && cron.UID == up.UID {
				levels = append(levels, cron.Annotations)
			}
		}
		owned = []types.UID{top.UID}
	}
	if hasStrategy(levels) {
		return false, nil, nil
	}
	namespaced, err := c.source.Policies(ctx, ns.Name, top)
	if err != nil || len(namespaced) > 0 {
		return false, nil, err
	}
	return !anyTrue(annotations.Skip, levels) || !p.SkipAllowed(), owned, nil
}

func hasStrategy(levels []map[string]string) bool {
	for _, l := range levels {
		if _, _, found := strategy.Find(l, nil); found {
			return true
		}
	}
	return false
}

func anyTrue(key string, levels []map[string]string) bool {
	for _, l := range levels {
		if isTrue(l[key]) {
			return true
		}
	}
	return false
}

func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// podReader reads the Running pods of the placed workloads of one
// namespace, by controller, and their nodes' labels, each node once per
// reconcile.
type podReader struct {
	c         *Controller
	strategy  *compiled.Strategy
	namespace string
	// replicaSets maps a Deployment's or Rollout's UID to its
	// ReplicaSets', listed once per namespace when first needed.
	replicaSets map[types.UID][]types.UID
	// jobs maps a CronJob's UID to its Jobs, the same.
	jobs  map[types.UID][]*metav1.PartialObjectMetadata
	nodes map[string]map[string]string
}

// livePods lists the live pods of the Job or Workflow uid.
func (x *podReader) livePods(ctx context.Context, uid types.UID) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := x.c.kubeClient.List(ctx, &pods, client.InNamespace(x.namespace), client.MatchingFields{podcache.IndexController: string(uid)}); err != nil {
		return nil, fmt.Errorf("listing pods of %s in %s: %w", uid, x.namespace, err)
	}
	live := pods.Items[:0]
	for i := range pods.Items {
		if workload.Live(&pods.Items[i]) {
			live = append(live, pods.Items[i])
		}
	}
	return live, nil
}

// batchAnnotations are the annotations of the Job or Workflow top and of
// each of its live pods, the pods' first: a pod's own (its template's) win.
func (x *podReader) batchAnnotations(ctx context.Context, top *metav1.PartialObjectMetadata) ([]map[string]string, error) {
	pods, err := x.livePods(ctx, top.UID)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, 0, len(pods)+1)
	for i := range pods {
		out = append(out, pods[i].Annotations)
	}
	return append(out, top.Annotations), nil
}

// jobsOf returns the Jobs the CronJob uid controls.
func (x *podReader) jobsOf(ctx context.Context, uid types.UID) ([]*metav1.PartialObjectMetadata, error) {
	if x.jobs == nil {
		jobs, err := workload.JobsByCronJob(ctx, x.c.kubeClient, x.namespace)
		if err != nil {
			return nil, err
		}
		x.jobs = jobs
	}
	return x.jobs[uid], nil
}

// splitBatch is the split of a batch workload over the live pods of owned
// (its Job or Workflow, or a CronJob's Jobs): they are its replicas.
func (x *podReader) splitBatch(ctx context.Context, top *metav1.PartialObjectMetadata, owned []types.UID) (split.Split, error) {
	in := split.Input{Strategy: x.strategy}
	for _, uid := range owned {
		pods, err := x.livePods(ctx, uid)
		if err != nil {
			return split.Split{}, fmt.Errorf("%s %s/%s: %w", top.Kind, x.namespace, top.Name, err)
		}
		in.Replicas += int64(len(pods))
		for i := range pods {
			pod := &pods[i]
			if pod.Status.Phase != corev1.PodRunning || !podutil.IsScheduled(pod) {
				continue
			}
			if x.c.signer.BeyondCaps(pod) {
				in.BeyondCaps++
				continue
			}
			l, err := x.nodeLabels(ctx, pod.Spec.NodeName)
			if err != nil {
				return split.Split{}, err
			}
			in.NodeLabels = append(in.NodeLabels, l)
		}
	}
	return split.Compute(in), nil
}

// split is the workload's split now.
func (x *podReader) split(ctx context.Context, top *metav1.PartialObjectMetadata, replicas int64) (split.Split, error) {
	controllers := []types.UID{top.UID}
	if k := top.GroupVersionKind(); k == workload.DeploymentGVK || k == workload.RolloutGVK {
		if err := x.listReplicaSets(ctx); err != nil {
			return split.Split{}, err
		}
		controllers = x.replicaSets[top.UID]
	}
	in := split.Input{Strategy: x.strategy, Replicas: replicas}
	for _, uid := range controllers {
		var pods corev1.PodList
		if err := x.c.kubeClient.List(ctx, &pods, client.InNamespace(x.namespace), client.MatchingFields{podcache.IndexController: string(uid)}); err != nil {
			return split.Split{}, fmt.Errorf("listing pods of %s %s/%s: %w", top.Kind, x.namespace, top.Name, err)
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if pod.Status.Phase != corev1.PodRunning || !podutil.IsScheduled(pod) || podutil.IsTerminating(pod) {
				continue
			}
			if x.c.signer.BeyondCaps(pod) {
				in.BeyondCaps++ // in no group, whatever its node
				continue
			}
			l, err := x.nodeLabels(ctx, pod.Spec.NodeName)
			if err != nil {
				return split.Split{}, err
			}
			in.NodeLabels = append(in.NodeLabels, l)
		}
	}
	return split.Compute(in), nil
}

func (x *podReader) listReplicaSets(ctx context.Context) error {
	if x.replicaSets != nil {
		return nil
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(workload.ReplicaSetGVK.GroupVersion().WithKind("ReplicaSetList"))
	if err := x.c.kubeClient.List(ctx, list, client.InNamespace(x.namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing replicasets of %s: %w", x.namespace, err)
	}
	x.replicaSets = map[types.UID][]types.UID{}
	for i := range list.Items {
		if up := metav1.GetControllerOfNoCopy(&list.Items[i]); up != nil {
			x.replicaSets[up.UID] = append(x.replicaSets[up.UID], list.Items[i].UID)
		}
	}
	return nil
}

func (x *podReader) nodeLabels(ctx context.Context, name string) (map[string]string, error) {
	if l, ok := x.nodes[name]; ok {
		return l, nil
	}
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := x.c.kubeClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting node %s: %w", name, err)
	}
	x.nodes[name] = node.Labels
	return node.Labels, nil
}

// offReason says in a few words why a split is not within quota: the
// first group outside its quota, or the pods on nodes of no group.
func offReason(sp split.Split) string {
	for i, g := range sp.Groups {
		if !g.Within() {
			return fmt.Sprintf("group %d (%s) %d running, quota %s", i+1, g.Key, g.Actual, split.Bounds(g.Min, g.Max))
		}
	}
	if sp.Unmatched > 0 {
		return fmt.Sprintf("%d running on nodes of no group", sp.Unmatched)
	}
	return "outside quota"
}
