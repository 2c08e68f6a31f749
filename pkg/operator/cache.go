package operator

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/controllers"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// startInformers starts, before the manager, every informer an admission
// reads, so that the first admission does not wait for one and readiness
// (cachesSynced) covers them all, and adds the field indexes. It returns the
// PlacementPolicy source, nil when their CRD is not served.
func startInformers(ctx context.Context, mgr manager.Manager, apis *APIWatch, o *options.Options) (*policy.Source, error) {
	logger := log.FromContext(ctx)
	var objs []client.Object
	// The owners a pod's workload is resolved through, as metadata: an
	// optional API (Argo Rollouts and Workflows) only when it is served.
	for _, gvk := range workload.Owners {
		if !apis.Served(gvk) {
			logger.Info("workload kind not served, not followed", "kind", gvk.Kind)
			continue
		}
		objs = append(objs, metadataOf(gvk))
	}
	objs = append(objs, &corev1.Pod{}, metadataOf(corev1.SchemeGroupVersion.WithKind("Node")))
	// The placement Lease, read at every admission to know whether a
	// leader is alive.
	if o.LeaderElect {
		objs = append(objs, &coordinationv1.Lease{})
	}
	var policies *policy.Source
	clusterPolicies := false
	if apis.Served(v1alpha1.PlacementPolicyGVK) {
		if err := policy.IndexPolicies(ctx, mgr.GetFieldIndexer()); err != nil {
			return nil, fmt.Errorf("indexing placement policies: %w", err)
		}
		objs = append(objs, &v1alpha1.PlacementPolicy{})
		policies = policy.NewSource(mgr.GetClient())
		// helm does not upgrade the CRDs of its crds/ directory: an
		// upgraded installation may serve PlacementPolicies alone.
		if apis.Served(v1alpha1.ClusterPlacementPolicyGVK) {
			objs = append(objs, &v1alpha1.ClusterPlacementPolicy{})
			policies.WithClusterPolicies(o.Excluded())
			clusterPolicies = true
		} else {
			logger.Info("apportion.dev/v1alpha1 ClusterPlacementPolicy CRD not found: no cluster-wide policies")
		}
	} else {
		logger.Info("apportion.dev/v1alpha1 PlacementPolicy CRD not found: strategies from annotations only")
	}
	// Namespaces opt in to architecture placement with a label, and cluster
	// policies select them by their labels; with the scoped webhook,
	// apportion labels them when a workload opts in.
	if clusterPolicies || o.Architectures == options.ArchitecturesOptIn || o.WebhookScope == options.WebhookScopeNamespaces {
		objs = append(objs, metadataOf(corev1.SchemeGroupVersion.WithKind("Namespace")))
	}
	for _, obj := range objs {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			gvk, _ := apiutil.GVKForObject(obj, mgr.GetScheme())
			return nil, fmt.Errorf("starting the %s informer: %w", gvk.Kind, err)
		}
	}
	return policies, nil
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return obj
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
				Field:     fields.OneTermEqualSelector("source", capacity.KarpenterComponent),
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

// keptAnnotations are the pod annotations the controllers read, each
// declared next to the code that reads it; the others (a decision record,
// kubectl's last-applied configuration, ...) are dropped. Patches are
// computed between two copies of the cached pod, so a key absent from both is
// never touched.
var keptAnnotations = controllers.PodAnnotations()

// StripPod keeps only what placement and counting read from a pod: metadata
// (with only the annotations above), the scheduling fields a decision edits,
// and the phase. Containers, volumes and status details are dropped, which
// is most of a pod's size. What is kept is cached as a podcache.Pod, which
// shares what the pods of a revision have in common: about 1 KiB of heap per
// pod instead of 3 (BenchmarkMemoryPerCachedPod).
func StripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return podcache.Compact(stripPod(pod)), nil
}

// stripPod is StripPod before compaction: the pod as the cache gives it out.
func stripPod(pod *corev1.Pod) *corev1.Pod {
	// The cache reader sets the kind on what it gives out.
	pod.TypeMeta = metav1.TypeMeta{}
	// Of managedFields only a deletion cost another writer set after the
	// pod's creation is kept (decision.ForeignCostWriters, nil as a rule):
	// the deletion-cost controller warns about a second writer.
	pod.ManagedFields = decision.ForeignCostWriters(pod)
	var kept map[string]string
	for _, k := range keptAnnotations {
		if v, ok := pod.Annotations[k]; ok {
			if kept == nil {
				kept = make(map[string]string, 4)
			}
			kept[k] = v
		}
	}
	if v, ok := kept[annotations.Shadow]; ok {
		// The tally reads the shadow decision's group, NodePool and
		// signature; its record and architectures are for people, and a
		// value that does not parse is no shadow decision.
		if c := decision.CompactShadow(v); c != "" {
			kept[annotations.Shadow] = c
		} else {
			delete(kept, annotations.Shadow)
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
	return pod
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
// about limits). A longer one keeps only the parts fallback reads
// (capacity.CompactFailedScheduling), then is cut.
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
		msg = capacity.CompactFailedScheduling(msg)
	}
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
