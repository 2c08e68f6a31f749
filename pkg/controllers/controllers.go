// Package controllers is the one list of apportion's controllers
// (NewControllers) and of what they read from cached pods (PodAnnotations).
// Each controller lives in its own package below this one, and none imports
// another: what they share (the capacity choice, the outage tracker, gate
// release, decisions) lives in packages named for it.
package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/awslabs/operatorpkg/controller"
	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	controllerruntime "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/controllers/clusterpolicystatus"
	"github.com/apportion-dev/apportion/pkg/controllers/deletioncost"
	"github.com/apportion-dev/apportion/pkg/controllers/drift"
	"github.com/apportion-dev/apportion/pkg/controllers/fallback"
	"github.com/apportion-dev/apportion/pkg/controllers/gatejanitor"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/controllers/policystatus"
	"github.com/apportion-dev/apportion/pkg/controllers/rebalance"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/imagearch"
	"github.com/apportion-dev/apportion/pkg/lease"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/scope"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// PodAnnotations are the pod annotations any controller reads from the pod
// informer cache, which drops every other one. Each package declares the
// keys it reads next to the code that reads them, and a test checks that
// every annotation read in those packages is declared.
func PodAnnotations() []string {
	var keys []string
	for _, k := range [][]string{
		decision.PodAnnotations, workload.PodAnnotations,
		fallback.PodAnnotations, deletioncost.PodAnnotations,
	} {
		keys = append(keys, k...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// Served tells whether the API server serves a kind; the operator's
// discovery watch is one.
type Served interface {
	Served(gvk schema.GroupVersionKind) bool
}

// Dependencies are what the operator built before the controllers: the
// clients and the state several controllers share.
type Dependencies struct {
	Clock    clock.Clock
	Recorder *events.Recorder
	APIs     Served
	Signer   *decision.Signer
	// Policies reads PlacementPolicies; nil without their CRD.
	Policies *policy.Source
	// PullSecrets reads image pull secrets; nil unless --read-pull-secrets.
	PullSecrets kubernetes.Interface
	// Lease is this replica's hold on the placement Lease; nil without
	// leader election.
	Lease Lease
	// LeaseWatch is the placement Lease as its informer shows it, shared
	// with the webhook: NewControllers registers its handler. Nil without
	// leader election.
	LeaseWatch *lease.Watch
}

// Lease is this replica's hold on the placement Lease: its identity, and
// when it last renewed the Lease (zero when it does not hold it).
type Lease interface {
	Identity() string
	Renewed() time.Time
}

// rebalanceQPS paces the evictions of fallback pods cluster-wide; each
// workload also waits for its last eviction's replacement to run.
const rebalanceQPS = 1

// followedKinds are the workload kinds whose pods apportion places.
var followedKinds = []schema.GroupVersionKind{workload.DeploymentGVK, workload.StatefulSetGVK, workload.ReplicaSetGVK, workload.RolloutGVK}

// NewControllers returns every controller and informer hook apportion runs,
// in the order they register.
func NewControllers(ctx context.Context, mgr manager.Manager, o *options.Options, d Dependencies) []controller.Controller {
	kube := mgr.GetClient()
	nodePools := d.APIs.Served(capacity.NodePoolGVK)
	// NodePools (or node groups) out of capacity: shared by the detector
	// that marks them and the controllers that pass them over.
	tracker := capacity.NewTracker(d.Clock, o.CapacityTTL, o.CapacityMaxTTL)
	if !nodePools {
		logNodeLabelMode(log.FromContext(ctx), mgr.GetRESTMapper())
	}
	groupCapacity, watchCapacity := newCapacity(kube, d.Clock, tracker, o, nodePools)
	policySource := d.Policies.OrNil()
	// One cache of compiled strategies for every controller that reads them.
	strategies := compiled.NewCache(compiled.DefaultSize)
	tally := placement.NewTally()
	placer := placement.NewController(d.Clock, kube, d.Recorder, groupCapacity, tally.WithSigner(d.Signer), o.GateTimeout).
		WithNodes(kube).WithPolicies(policySource).WithDefaultMode(o.DefaultMode).
		WithExcludedNamespaces(o.Excluded(), o.Architectures == options.ArchitecturesOptIn).WithSigner(d.Signer).WithStrategies(strategies).WithAPIReader(mgr.GetAPIReader())
	if o.Architectures != options.ArchitecturesOff {
		placer.WithImages(newImages(d.PullSecrets, o), o.ImageTimeout).ArchitecturesForAll(o.Architectures == options.ArchitecturesAll)
	}
	placer.WithArchitectureRules(architectureRules(log.FromContext(ctx), o, nodePools))
	// The placement Lease, fed by its informer, for the check before each
	// decision's write.
	if o.LeaderElect && d.Lease != nil && d.LeaseWatch != nil {
		placer.WithLease(placement.Lease{Holder: d.LeaseWatch, Identity: d.Lease.Identity(), Renewed: d.Lease.Renewed, Duration: o.LeaseDuration})
	}
	cs := []controller.Controller{
		// Drift and the policy statuses read a workload's pods through
		// it: added once, before the cache starts.
		registerFunc(func(ctx context.Context, m manager.Manager) error {
			return podcache.IndexByController(ctx, m.GetFieldIndexer())
		}),
		watchCapacity,
		countPods(tally),
		placer,
		janitor(d, kube, o),
		fallback.NewController(d.Clock, kube, d.Recorder, tracker, fallback.Options{
			Timeout: o.CapacityTimeout, NominationWait: o.CapacityNominationWait, DeleteQPS: o.CapacityDeleteQPS,
			NodeLabels: !nodePools, ScaleFromZero: o.ScaleFromZero,
			Signer: d.Signer, APIReader: mgr.GetAPIReader(),
		}),
		deletioncost.NewController(kube, d.Signer).WithRecorder(d.Recorder).WithPolicies(policySource).WithDefaultMode(o.DefaultMode).WithStrategies(strategies),
		drift.NewController(d.Clock, kube, d.Recorder, groupCapacity, drift.Options{
			After: o.DriftAfter, Resolve: []workload.Option{workload.WithPolicies(policySource), workload.WithDefaultMode(o.DefaultMode)}, Strategies: strategies,
			Controllers: served(d.APIs, drift.Controllers), Signer: d.Signer,
		}),
	}
	if d.LeaseWatch != nil {
		cs = append(cs, watchLease(d.LeaseWatch))
	}
	if d.Policies != nil {
		// The status controllers count the batch owners too, from the
		// metadata informers Resolve reads them through.
		followed := served(d.APIs, ownerKinds())
		cs = append(cs, policystatus.NewController(d.Clock, kube, groupCapacity, d.Policies,
			policystatus.Options{Kinds: followed, NodePools: nodePools, Signer: d.Signer}).WithStrategies(strategies))
		if d.APIs.Served(v1alpha1.ClusterPlacementPolicyGVK) {
			cs = append(cs, clusterpolicystatus.NewController(d.Clock, kube, d.Policies, d.Recorder, followed).WithSigner(d.Signer))
		}
	}
	if o.WebhookScope == options.WebhookScopeNamespaces {
		cs = append(cs, sweepNamespaces(kube, d, o))
		if d.Policies != nil && d.APIs.Served(v1alpha1.ClusterPlacementPolicyGVK) {
			cs = append(cs, coverNamespaces(kube, d, o))
		}
	}
	if o.Rebalance {
		cs = append(cs, rebalance.NewController(d.Clock, kube, d.Recorder, groupCapacity, policySource, d.Signer, rebalanceQPS).WithStrategies(strategies))
	}
	return cs
}

// ownerKinds are the workload kinds apportion follows and the batch owners.
func ownerKinds() []schema.GroupVersionKind {
	return append(slices.Clone(followedKinds), workload.JobGVK, workload.CronJobGVK, workload.WorkflowGVK)
}

// served are the kinds of gvks the API server serves.
func served(apis Served, gvks []schema.GroupVersionKind) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for _, gvk := range gvks {
		if apis.Served(gvk) {
			out = append(out, gvk)
		}
	}
	return out
}

// namespaceSweepInterval is how often the leader labels the namespaces
// that hold something opted in (scope.Marker.Sweep). The validators label
// them as objects are admitted; the sweep repairs what they missed.
const namespaceSweepInterval = 5 * time.Minute

// sweepNamespaces runs scope.Marker.Sweep on the leader, at its start and
// then every namespaceSweepInterval.
func sweepNamespaces(kube client.Client, d Dependencies, o *options.Options) registerFunc {
	marker := &scope.Marker{Reader: kube, Writer: kube, Excluded: sets.New(o.Excluded()...)}
	return func(_ context.Context, m manager.Manager) error {
		// A batch owner opts in its namespace as any workload does.
		kinds := served(d.APIs, ownerKinds())
		return m.Add(manager.RunnableFunc(func(ctx context.Context) error {
			for {
				if err := marker.Sweep(ctx, kube, kinds, d.Policies != nil, d.Policies); err != nil {
					log.FromContext(ctx).Error(err, "labelling the namespaces that hold opted-in workloads; retried at the next sweep")
				}
				select {
				case <-ctx.Done():
					return nil
				case <-d.Clock.After(namespaceSweepInterval):
				}
			}
		}))
	}
}

// coverNamespaces labels, on the leader, a namespace created or relabelled
// into a cluster policy's selector (scope.Marker.Covering), from the
// namespace metadata informer, and the namespaces a cluster policy covers
// once the policy is cached (created, or its spec changed:
// scope.Marker.Covered), from the cluster policy informer: a namespace
// whose event came before its policy's is looked at again. Its pods reach
// the scoped webhook from the first, not from the next sweep.
func coverNamespaces(kube client.Client, d Dependencies, o *options.Options) registerFunc {
	marker := &scope.Marker{Reader: kube, Writer: kube, Excluded: sets.New(o.Excluded()...)}
	return func(_ context.Context, m manager.Manager) error {
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		return controllerruntime.NewControllerManagedBy(m).
			Named("scope.namespaces").
			For(ns, builder.WithPredicates(scope.CoveringPredicate())).
			Watches(&v1alpha1.ClusterPlacementPolicy{}, marker.Covered(d.Policies)).
			Complete(marker.Covering(d.Policies))
	}
}

// janitor is the gate janitor; with leader election, a pod's gate timeout
// also counts from the last change of placement leader.
func janitor(d Dependencies, kube client.Client, o *options.Options) *gatejanitor.Controller {
	j := gatejanitor.NewController(d.Clock, kube, d.Recorder, o.GateTimeout)
	if o.LeaderElect && d.LeaseWatch != nil {
		j.WithLease(d.LeaseWatch)
	}
	return j
}

// newCapacity picks how groups are matched to capacity: Karpenter's
// NodePools when their API is served, the nodes' labels otherwise. The
// second value keeps the choice's cache current from the informers.
func newCapacity(kube client.Reader, clk clock.PassiveClock, tracker *capacity.Tracker, o *options.Options, nodePools bool) (capacity.Capacity, controller.Controller) {
	if !nodePools {
		nodes := &capacity.NodeLabelCapacity{Reader: kube, Tracker: tracker, ScaleFromZero: o.ScaleFromZero}
		return nodes, registerFunc(func(ctx context.Context, m manager.Manager) error {
			_, err := handle(ctx, m, nodeMetadata(), capacity.OnLabelChange(nodes.Invalidate))
			return err
		})
	}
	pools := &capacity.NodePoolCapacity{Reader: kube, Tracker: tracker, Clock: clk}
	invalidate := func(any) { pools.Invalidate() }
	return pools, registerFunc(func(ctx context.Context, m manager.Manager) error {
		if _, err := handle(ctx, m, &karpv1.NodePool{}, toolscache.ResourceEventHandlerFuncs{
			AddFunc: invalidate, DeleteFunc: invalidate, UpdateFunc: func(any, any) { pools.Invalidate() },
		}); err != nil {
			return err
		}
		// The nodes' label keys tell a group's label that nothing
		// carries (a typo) from one only nodes outside Karpenter have.
		_, err := handle(ctx, m, nodeMetadata(), capacity.OnLabelChange(pools.InvalidateNodes))
		return err
	})
}

// preV1Karpenter are the NodePool APIs of Karpenter before v1.0, newest
// first, with the releases that served them. apportion reads only
// karpenter.sh/v1 (Karpenter v1.0 and newer, whose NodePool CRD also served
// v1beta1 until v1.1).
var preV1Karpenter = []struct {
	gvk      schema.GroupVersionKind
	releases string
}{
	{schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1beta1", Kind: "NodePool"}, "v0.32 to v0.37"},
	{schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1alpha5", Kind: "Provisioner"}, "v0.31 or older"},
}

// karpenterUpgradeGuide is Karpenter's guide to its v1 APIs.
const karpenterUpgradeGuide = "https://karpenter.sh/docs/upgrading/v1-migration/"

// architectureRules are the rules of --architecture-rules the placement
// controller applies: in node-label mode only, with images inspected. When
// they are set but not used, it says why once, at start.
func architectureRules(l logr.Logger, o *options.Options, nodePools bool) decision.ArchitectureRules {
	rules := o.ArchRules()
	switch {
	case len(rules) == 0:
		return nil
	case nodePools:
		l.Info("--architecture-rules is ignored with Karpenter: a NodePool opts in with the annotation " +
			annotations.Tolerate + `: "true", and pods gain the tolerations its taints need`)
		return nil
	case o.Architectures == options.ArchitecturesOff:
		l.Info("--architecture-rules is ignored with --architectures=off: no image is inspected")
		return nil
	}
	return rules
}

// logNodeLabelMode says at start why apportion places on node labels alone:
// no Karpenter (info), or a Karpenter older than v1.0 (error: it runs, but
// apportion cannot read its NodePools). mapper answers from discovery; a
// discovery error counts as no Karpenter, as this is only a message.
func logNodeLabelMode(l logr.Logger, mapper meta.RESTMapper) {
	for _, old := range preV1Karpenter {
		if _, err := mapper.RESTMapping(old.gvk.GroupKind(), old.gvk.Version); err != nil {
			continue
		}
		found := old.gvk.GroupVersion().String() + " " + old.gvk.Kind
		l.Error(fmt.Errorf("%s is served (Karpenter %s), karpenter.sh/v1 NodePool is not", found, old.releases),
			"Karpenter older than v1.0 found: apportion supports only Karpenter v1.0 or newer (karpenter.sh/v1 NodePools) "+
				"and places on node labels alone until Karpenter is upgraded; upgrade Karpenter to v1 ("+karpenterUpgradeGuide+
				"), and apportion restarts by itself once karpenter.sh/v1 NodePools are served",
			"found", found,
			"karpenterReleases", old.releases,
			"supported", "karpenter.sh/v1 NodePool (Karpenter v1.0 or newer)",
			"instead", "a group counts as available only while some node carries its labels (always, with --scale-from-zero); "+
				"NodePool limits, weights and Karpenter's launch failures are not read")
		return
	}
	l.Info("karpenter.sh/v1 NodePool CRD not found: placing on node labels alone")
}

// newImages is the image inspector for architecture placement. Without
// --read-pull-secrets kube is nil and it reads no Secret or ServiceAccount.
func newImages(kube kubernetes.Interface, o *options.Options) *imagearch.Inspector {
	return imagearch.New(kube, imagearch.Options{
		CacheSize:       o.ImageCacheSize,
		IfNotPresentTTL: o.IfNotPresentCacheTime,
		PullAlwaysTTL:   o.PullAlwaysCacheTime,
		FailureTTL:      o.ImageFailureCacheTime,
		RegistryTimeout: imagearch.DefaultRegistryTimeout,
		BreakerFailures: imagearch.DefaultBreakerFailures,
		BreakerOpen:     imagearch.DefaultBreakerOpen,
		Registries:      o.Registries(),
	})
}

// registerFunc makes a registration step (informer hooks) a
// controller.Controller, so that NewControllers lists it with the rest.
type registerFunc func(context.Context, manager.Manager) error

func (f registerFunc) Register(ctx context.Context, m manager.Manager) error { return f(ctx, m) }

// countPods keeps the tally from the informers: pods by revision, and
// strays (pods admitted without a decision) in the group their node's labels
// match.
func countPods(tally *placement.Tally) registerFunc {
	return func(ctx context.Context, m manager.Manager) error {
		registration, err := handle(ctx, m, &corev1.Pod{}, tally.EventHandler())
		if err != nil {
			return err
		}
		tally.SetSynced(registration.HasSynced)
		_, err = handle(ctx, m, nodeMetadata(), tally.NodeEventHandler())
		return err
	}
}

func nodeMetadata() *metav1.PartialObjectMetadata {
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	return node
}

// watchLease registers w on the Lease informer: one handler for the
// placement controller, the gate janitor and the webhook, whose replica is
// ready once the handler has had the informer's first listing.
func watchLease(w *lease.Watch) controller.Controller {
	return registerFunc(func(ctx context.Context, m manager.Manager) error {
		reg, err := handle(ctx, m, &coordinationv1.Lease{}, w)
		if err != nil {
			return err
		}
		w.WithSynced(reg.HasSynced)
		return nil
	})
}

// handle adds h to the informer of obj's kind.
func handle(ctx context.Context, m manager.Manager, obj client.Object, h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	gvk, err := apiutil.GVKForObject(obj, m.GetScheme())
	if err != nil {
		return nil, fmt.Errorf("finding the kind to watch: %w", err)
	}
	inf, err := m.GetCache().GetInformer(ctx, obj)
	if err != nil {
		return nil, fmt.Errorf("starting the %s informer: %w", gvk.Kind, err)
	}
	registration, err := inf.AddEventHandler(h)
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", gvk.Kind, err)
	}
	return registration, nil
}
