// Package operator assembles `apportion webhook`: one controller-runtime
// manager with the admission webhooks, the placement controller (leader
// only), the gate janitor (every replica), the capacity detector and the
// deletion-cost controller (leader only), informer caches trimmed to what they need, metrics and
// health endpoints; with --cert-secret-name, the certificate rotator (every
// replica), and the webhook server starts once its certificate is written.
package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	capacitypkg "github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/certs"
	capacityctrl "github.com/apportion-dev/apportion/pkg/controllers/capacity"
	"github.com/apportion-dev/apportion/pkg/controllers/deletioncost"
	"github.com/apportion-dev/apportion/pkg/controllers/gatejanitor"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/controllers/policystatus"
	"github.com/apportion-dev/apportion/pkg/controllers/rebalance"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/imagearch"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/policy"
	apwebhook "github.com/apportion-dev/apportion/pkg/webhook"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// NodePoolGVK is Karpenter's NodePool.
var NodePoolGVK = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodePool"}

// Scheme holds the built-in kinds and Karpenter's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	gv := NodePoolGVK.GroupVersion()
	s.AddKnownTypes(gv, &karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	metav1.AddToGroupVersion(s, gv)
	return s, nil
}

// Run starts the manager and blocks until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o *options.Options) error {
	scheme, err := Scheme()
	if err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	hostname, _ := os.Hostname()
	leaseDuration, renewDeadline, retryPeriod := o.LeaseDuration, o.RenewDeadline, o.RetryPeriod
	tlsMin := func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }
	// HTTP/1.1 only: a draining replica retires each connection with
	// "Connection: close" (see drain), which HTTP/2 has no per-response
	// way to do; it also keeps HTTP/2's rapid-reset attacks out.
	http1Only := func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
	drainer := newDrain(clock.RealClock{})
	server := &startAfter{Server: webhook.NewServer(webhook.Options{
		Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir,
		TLSOpts: []func(*tls.Config){tlsMin, http1Only},
	}), drain: drainer}
	gracefulShutdownTimeout := o.GracefulShutdownTimeout
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.SystemNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		GracefulShutdownTimeout:       &gracefulShutdownTimeout,
		WebhookServer:                 server,
		Cache:                         CacheOptions(o),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	metrics.Register()
	logger := log.FromContext(ctx)
	clk := clock.RealClock{}
	recorder := truncatingRecorder{mgr.GetEventRecorder("apportion")}

	if o.CertSecretName != "" {
		rotator := certs.NewRotator(clk, mgr.GetAPIReader(), mgr.GetClient(), certs.Config{
			Namespace: o.SystemNamespace, SecretName: o.CertSecretName, ServiceName: o.WebhookServiceName,
			CertDir:                        o.CertDir,
			MutatingWebhookConfiguration:   o.MutatingWebhookConfiguration,
			ValidatingWebhookConfiguration: o.ValidatingWebhookConfiguration,
			CAValidity:                     o.CAValidity, CertValidity: o.CertValidity, RenewBefore: o.CertRenewBefore,
		})
		if err := mgr.Add(rotator); err != nil {
			return fmt.Errorf("adding the certificate rotator: %w", err)
		}
		server.ready = rotator.Ready()
	}

	// The optional APIs as they are now; if one comes or goes later, the
	// watch ends the process so that the restart adapts.
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the discovery client: %w", err)
	}
	apis, err := NewAPIWatch(dc, o.APICheckInterval, NodePoolGVK, workload.ReplicaSetGVK, workload.DeploymentGVK, workload.StatefulSetGVK, workload.RolloutGVK, v1alpha1.PlacementPolicyGVK)
	if err != nil {
		return err
	}
	if err := mgr.Add(apis); err != nil {
		return err
	}

	// NodePools (or node groups) out of capacity, shared by the detector
	// that marks them and the placement controller that passes them over.
	tracker := capacitypkg.NewTracker(clk, o.CapacityTTL, o.CapacityMaxTTL)
	var capacity capacitypkg.Capacity
	if !apis.Served(NodePoolGVK) {
		logger.Info("karpenter.sh/v1 NodePool CRD not found: placing on node labels alone")
		nodes := &capacitypkg.NodeLabelCapacity{Reader: mgr.GetClient(), Tracker: tracker, ScaleFromZero: o.ScaleFromZero}
		node := &metav1.PartialObjectMetadata{}
		node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
		inf, err := mgr.GetCache().GetInformer(ctx, node)
		if err != nil {
			return fmt.Errorf("starting the node informer: %w", err)
		}
		if _, err := inf.AddEventHandler(capacitypkg.OnLabelChange(nodes.Invalidate)); err != nil {
			return fmt.Errorf("watching nodes: %w", err)
		}
		capacity = nodes
	} else {
		pools := &capacitypkg.NodePoolCapacity{Reader: mgr.GetClient(), Tracker: tracker}
		inf, err := mgr.GetCache().GetInformer(ctx, &karpv1.NodePool{})
		if err != nil {
			return fmt.Errorf("starting the NodePool informer: %w", err)
		}
		invalidate := func(any) { pools.Invalidate() }
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: invalidate, DeleteFunc: invalidate, UpdateFunc: func(any, any) { pools.Invalidate() },
		}); err != nil {
			return fmt.Errorf("watching NodePools: %w", err)
		}
		capacity = pools
	}
	podInformer, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("starting the pod informer: %w", err)
	}
	tally := placement.NewTally()
	registration, err := podInformer.AddEventHandler(tally.EventHandler())
	if err != nil {
		return fmt.Errorf("counting pods: %w", err)
	}
	tally.SetSynced(registration.HasSynced)
	// Start the metadata informers now, so the first admission does not
	// wait for them.
	for _, gvk := range []schema.GroupVersionKind{workload.ReplicaSetGVK, workload.DeploymentGVK, workload.StatefulSetGVK, workload.RolloutGVK} {
		if !apis.Served(gvk) {
			logger.Info("workload kind not served, not followed", "kind", gvk.Kind)
			continue
		}
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(gvk)
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("starting %s informer: %w", gvk.Kind, err)
		}
	}

	// The placement Lease, read at every admission to know whether a leader
	// is alive: started now, so readiness (cachesSynced) covers it.
	if o.LeaderElect {
		if _, err := mgr.GetCache().GetInformer(ctx, &coordinationv1.Lease{}); err != nil {
			return fmt.Errorf("starting the Lease informer: %w", err)
		}
	}

	// Node metadata: strays (pods admitted without a decision) count in the
	// group their node's labels match.
	nodeMeta := &metav1.PartialObjectMetadata{}
	nodeMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	nodeInformer, err := mgr.GetCache().GetInformer(ctx, nodeMeta)
	if err != nil {
		return fmt.Errorf("starting the node informer: %w", err)
	}
	if _, err := nodeInformer.AddEventHandler(tally.NodeEventHandler()); err != nil {
		return fmt.Errorf("counting strays by node: %w", err)
	}
	// PlacementPolicies (when their CRD is installed): indexed by target,
	// read through one Source at admission, by the placement controller and
	// the deletion-cost controller.
	var policies *policy.Source
	var policySource workload.PolicySource // nil without the CRD
	if apis.Served(v1alpha1.PlacementPolicyGVK) {
		if err := policy.IndexPolicies(ctx, mgr.GetFieldIndexer()); err != nil {
			return fmt.Errorf("indexing placement policies: %w", err)
		}
		if _, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.PlacementPolicy{}); err != nil {
			return fmt.Errorf("starting the PlacementPolicy informer: %w", err)
		}
		policies = policy.NewSource(mgr.GetClient())
		policySource = policies
	} else {
		logger.Info("apportion.dev/v1alpha1 PlacementPolicy CRD not found: strategies from annotations only")
	}
	signer := decision.RandomSigner()
	if o.DecisionKeyFile != "" {
		if signer, err = decision.LoadSigner(o.DecisionKeyFile); err != nil {
			return err
		}
	} else {
		logger.Info("no --decision-key-file: decisions are signed with a key of this process only; capacity fallback ignores pods placed by other replicas or earlier runs")
	}
	placer := placement.NewController(clk, mgr.GetClient(), recorder, capacity, tally.WithSigner(signer), o.GateTimeout).WithNodes(mgr.GetClient()).WithPolicies(policySource).WithSigner(signer)
	if o.Architectures != options.ArchitecturesOff {
		// Pull secrets are read only with --read-pull-secrets; without it
		// kube is nil and the Inspector reads no Secret or ServiceAccount.
		kube, err := pullSecretsClient(o, func() (kubernetes.Interface, error) { return kubernetes.NewForConfig(cfg) })
		if err != nil {
			return err
		}
		images := imagearch.New(kube, imagearch.Options{
			CacheSize:       o.ImageCacheSize,
			IfNotPresentTTL: o.IfNotPresentCacheTime,
			PullAlwaysTTL:   o.PullAlwaysCacheTime,
			FailureTTL:      o.ImageFailureCacheTime,
			RegistryTimeout: imagearch.DefaultRegistryTimeout,
			BreakerFailures: imagearch.DefaultBreakerFailures,
			BreakerOpen:     imagearch.DefaultBreakerOpen,
			Registries:      o.Registries(),
		})
		placer.WithImages(images, o.ImageTimeout).ArchitecturesForAll(o.Architectures == options.ArchitecturesAll)
	}
	if o.Architectures == options.ArchitecturesOptIn {
		// Namespaces opt in with a label, read at admission from this cache.
		ns := &metav1.PartialObjectMetadata{}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		if _, err := mgr.GetCache().GetInformer(ctx, ns); err != nil {
			return fmt.Errorf("starting the namespace informer: %w", err)
		}
	}

	controllers := []interface {
		Register(context.Context, ctrl.Manager) error
	}{
		placer,
		gatejanitor.NewController(clk, mgr.GetClient(), recorder, o.GateTimeout),
		capacityctrl.NewController(clk, mgr.GetClient(), recorder, tracker, capacityctrl.Options{
			Timeout: o.CapacityTimeout, NominationWait: o.CapacityNominationWait, DeleteQPS: o.CapacityDeleteQPS,
			NodeLabels: !apis.Served(NodePoolGVK), ScaleFromZero: o.ScaleFromZero,
			Signer: signer, APIReader: mgr.GetAPIReader(),
		}),
		deletioncost.NewController(mgr.GetClient(), signer).WithPolicies(policySource),
	}
	if policies != nil {
		var followed []schema.GroupVersionKind
		for _, gvk := range []schema.GroupVersionKind{workload.DeploymentGVK, workload.StatefulSetGVK, workload.ReplicaSetGVK, workload.RolloutGVK} {
			if apis.Served(gvk) {
				followed = append(followed, gvk)
			}
		}
		controllers = append(controllers, policystatus.NewController(clk, mgr.GetClient(), capacity, policies,
			policystatus.Options{Kinds: followed, NodePools: apis.Served(NodePoolGVK)}))
	}
	if o.Rebalance {
		controllers = append(controllers, rebalance.NewController(clk, mgr.GetClient(), recorder, capacity, policySource, signer, rebalanceQPS))
	}
	for _, c := range controllers {
		if err := c.Register(ctx, mgr); err != nil {
			return fmt.Errorf("registering controller: %w", err)
		}
	}

	hooks := mgr.GetWebhookServer()
	hooks.Register(apwebhook.PodMutatorPath, drainer.handler(&webhook.Admission{Handler: &apwebhook.PodMutator{
		Reader:   mgr.GetClient(),
		Leader:   &apwebhook.LeaseLiveness{Reader: mgr.GetClient(), Clock: clk, Namespace: o.SystemNamespace, Name: o.LeaderElectionID, Grace: o.LeaseDuration, Disabled: !o.LeaderElect},
		Recorder: recorder,
		Excluded: sets.New(o.Excluded()...),
		Policies: policySource,

		Architectures: o.Architectures,
		Profiles:      o.Profiles(),
	}}))
	hooks.Register(apwebhook.WorkloadValidatorPath, drainer.handler(&webhook.Admission{Handler: apwebhook.WorkloadValidator{}}))
	hooks.Register(apwebhook.PolicyValidatorPath, drainer.handler(&webhook.Admission{Handler: apwebhook.PolicyValidator{}}))
	if o.PodName != "" {
		// Drain as soon as this replica's pod is being deleted: during
		// its preStop sleep, before SIGTERM.
		if err := mgr.Add(&ownPod{reader: mgr.GetClient(), drain: drainer, clk: clock.RealClock{}, interval: 500 * time.Millisecond,
			key: client.ObjectKey{Namespace: o.SystemNamespace, Name: o.PodName}}); err != nil {
			return err
		}
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", hooks.StartedChecker()); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("caches", cachesSynced(mgr.GetCache())); err != nil {
		return err
	}
	logger.Info("starting", "identity", hostname, "leaderElection", o.LeaderElect, "gateTimeout", o.GateTimeout.String(),
		"certSecret", o.CertSecretName, "architectures", o.Architectures, "imageTimeout", o.ImageTimeout.String())
	return mgr.Start(ctx)
}

// CacheOptions are the informer caches' options: what each cache keeps.
// Every object loses its managedFields and kubectl's last-applied
// configuration (often the largest part of a workload's or a node's
// metadata, and nothing apportion reads); pods and Events keep only what is
// read from them; Events and Leases are narrowed to the few apportion needs.
func CacheOptions(o *options.Options) cache.Options {
	return cache.Options{
		DefaultTransform: StripMetadata,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Transform: StripPod},
			// PlacementPolicy status reads workloads' replicas and pod
			// template annotations; the metadata caches of the same kinds
			// share these options.
			&appsv1.Deployment{}:  {Transform: StripWorkload},
			&appsv1.StatefulSet{}: {Transform: StripWorkload},
			&appsv1.ReplicaSet{}:  {Transform: StripWorkload},
			// Only Karpenter's Events (capacity evidence), stripped.
			&corev1.Event{}: {
				Field:     fields.OneTermEqualSelector("source", capacitypkg.KarpenterComponent),
				Transform: StripEvent,
			},
			// Only the placement Lease: nodes' Leases are many.
			&coordinationv1.Lease{}: {
				Namespaces: map[string]cache.Config{o.SystemNamespace: {}},
				Field:      fields.OneTermEqualSelector("metadata.name", o.LeaderElectionID),
				Transform:  StripMetadata,
			},
		},
	}
}

// StripWorkload keeps what is read from a Deployment, StatefulSet or
// ReplicaSet: its metadata (StripMetadata), spec.replicas and its pod
// template's annotations. Containers, volumes and status, most of a
// workload's size, are dropped. Metadata-only objects get StripMetadata.
func StripWorkload(obj any) (any, error) {
	if _, err := StripMetadata(obj); err != nil {
		return nil, err
	}
	template := func(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: t.Annotations}}
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		o.Spec = appsv1.DeploymentSpec{Replicas: o.Spec.Replicas, Template: template(o.Spec.Template)}
		o.Status = appsv1.DeploymentStatus{}
	case *appsv1.StatefulSet:
		o.Spec = appsv1.StatefulSetSpec{Replicas: o.Spec.Replicas, Template: template(o.Spec.Template)}
		o.Status = appsv1.StatefulSetStatus{}
	case *appsv1.ReplicaSet:
		o.Spec = appsv1.ReplicaSetSpec{Replicas: o.Spec.Replicas, Template: template(o.Spec.Template)}
		o.Status = appsv1.ReplicaSetStatus{}
	}
	return obj, nil
}

// LastAppliedAnnotation is where `kubectl apply` keeps the whole manifest.
const LastAppliedAnnotation = corev1.LastAppliedConfigAnnotation

// StripMetadata drops managedFields and the last-applied configuration from
// any object (typed or metadata-only) before it is cached.
func StripMetadata(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
		if ann := m.GetAnnotations(); ann != nil {
			if _, ok := ann[LastAppliedAnnotation]; ok {
				delete(ann, LastAppliedAnnotation)
				m.SetAnnotations(ann)
			}
		}
	}
	return obj, nil
}

// rebalanceQPS paces the evictions of fallback pods cluster-wide; each
// workload also waits for its last eviction's replacement to run.
const rebalanceQPS = 1

// keptAnnotations are the pod annotations apportion reads; the others (a
// decision record, kubectl's last-applied configuration, ...) are dropped.
// Patches are computed between two copies of the cached pod, so a key absent
// from both is never touched.
var keptAnnotations = append([]string{
	annotations.Group, annotations.NodePool, annotations.Signature, annotations.Skip, annotations.Mode, annotations.LegacyEnabled, annotations.Architectures,
	annotations.CapacityTimeout, annotations.Fallback, annotations.Rebalance,
	apwebhook.MirrorPodAnnotation, deletioncost.Annotation,
}, annotations.StrategyNames...)

// StripPod keeps only what placement and counting read from a pod: metadata
// (with only the annotations above), the scheduling fields a decision edits,
// and the phase. Containers, volumes and status details are dropped, which
// is most of a pod's size.
func StripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	var kept map[string]string
	for _, k := range keptAnnotations {
		if v, ok := pod.Annotations[k]; ok {
			if kept == nil {
				kept = make(map[string]string, 4)
			}
			kept[k] = v
		}
	}
	pod.Annotations = kept
	spec := corev1.PodSpec{
		NodeName:        pod.Spec.NodeName,
		NodeSelector:    pod.Spec.NodeSelector,
		Affinity:        pod.Spec.Affinity,
		Tolerations:     pod.Spec.Tolerations,
		SchedulingGates: pod.Spec.SchedulingGates,
	}
	if decision.HasGate(pod) {
		// Placement inspects the images of gated pods with the pod's
		// pull credentials; once the gate is gone, the next update
		// strips them too.
		spec.Containers = imagesOnly(pod.Spec.Containers)
		spec.InitContainers = imagesOnly(pod.Spec.InitContainers)
		spec.ImagePullSecrets = pod.Spec.ImagePullSecrets
		spec.ServiceAccountName = pod.Spec.ServiceAccountName
	}
	pod.Spec = spec
	status := corev1.PodStatus{Phase: pod.Status.Phase}
	// Capacity fallback reads since when an unbound pod is unschedulable.
	if pod.Spec.NodeName == "" {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason, LastTransitionTime: c.LastTransitionTime}}
			}
		}
	}
	pod.Status = status
	return pod, nil
}

func imagesOnly(containers []corev1.Container) []corev1.Container {
	if len(containers) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(containers))
	for i, c := range containers {
		out[i] = corev1.Container{Name: c.Name, Image: c.Image, ImagePullPolicy: c.ImagePullPolicy}
	}
	return out
}

// maxEventMessage bounds a cached Event's message: Karpenter's
// FailedScheduling lists a part per NodePool, and the part about the pod's
// own pool is all capacity fallback reads (it names its pool when it is
// about limits).
const maxEventMessage = 8 << 10

// StripEvent keeps what capacity fallback reads from Karpenter's Events:
// the object, reason, message, source and times.
func StripEvent(obj any) (any, error) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	msg := ev.Message
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage]
	}
	return &corev1.Event{
		TypeMeta: ev.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: ev.Name, Namespace: ev.Namespace, UID: ev.UID,
			ResourceVersion: ev.ResourceVersion, CreationTimestamp: ev.CreationTimestamp},
		InvolvedObject: corev1.ObjectReference{Kind: ev.InvolvedObject.Kind, Namespace: ev.InvolvedObject.Namespace,
			Name: ev.InvolvedObject.Name, UID: ev.InvolvedObject.UID},
		Reason: ev.Reason, Message: msg, Type: ev.Type, Source: corev1.EventSource{Component: ev.Source.Component},
		ReportingController: ev.ReportingController,
		FirstTimestamp:      ev.FirstTimestamp, LastTimestamp: ev.LastTimestamp, EventTime: ev.EventTime, Count: ev.Count,
	}, nil
}
