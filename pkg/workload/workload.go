// Package workload resolves the workload a pod belongs to (Pod -> ReplicaSet
// -> Deployment or Argo Rollout; Pod -> StatefulSet; a bare ReplicaSet; Pod
// -> Job, and the CronJob above it; Pod -> Argo Workflow), the revision it is
// counted in, and the strategy written on it. It reads only
// object metadata from the informer caches: everything it needs (owner
// references, annotations, the revision labels) is metadata, so the caches
// hold no specs. ReadSpec (spec.go), for the controllers that report on a
// workload, reads its spec.replicas and pod template annotations too.
// Classify (classify.go) is the pod webhook's one question about a pod being
// created: skip it (and why), hold it, decide it in shadow mode, or warn of
// an invalid strategy, from one walk of its owner chain.
package workload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Kinds apportion follows, by GroupVersionKind.
var (
	ReplicaSetGVK  = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}
	DeploymentGVK  = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	StatefulSetGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}
	DaemonSetGVK   = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}
	RolloutGVK     = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"}
	JobGVK         = schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
	CronJobGVK     = schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}
	WorkflowGVK    = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Workflow"}
)

// Owners are the kinds Resolve reads, from the metadata caches.
var Owners = []schema.GroupVersionKind{ReplicaSetGVK, DeploymentGVK, StatefulSetGVK, RolloutGVK, JobGVK, CronJobGVK, WorkflowGVK}

// IsBatch reports whether the pod's controller is a Job or an Argo Workflow:
// its pods run to completion, and only the live ones are counted.
func IsBatch(pod metav1.Object) bool {
	owner := metav1.GetControllerOfNoCopy(pod)
	return Is(owner, JobGVK) || Is(owner, WorkflowGVK)
}

// IsBatchKind reports whether gvk is a Job, a CronJob or an Argo Workflow:
// split over the live pods (of its Jobs, for a CronJob), not at a replica
// count.
func IsBatchKind(gvk schema.GroupVersionKind) bool {
	return gvk == JobGVK || gvk == CronJobGVK || gvk == WorkflowGVK
}

// Live reports whether a batch pod counts in its workload's split: neither
// Succeeded nor Failed nor being deleted.
func Live(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && pod.DeletionTimestamp == nil
}

// PodTemplateHashLabel is the revision label the ReplicaSet controller sets
// (named here because the tests of other packages build pods with it).
const PodTemplateHashLabel = appsv1.DefaultDeploymentUniqueLabelKey

// PodAnnotations are the pod annotations Resolve and ArchitecturesOptedIn
// read (a pod's own annotations override its workload's): an informer cache
// of pods keeps these.
// Classify reads the mirror annotation too (a static pod's mirror is never
// placed).
var PodAnnotations = append([]string{annotations.Skip, annotations.Mode, annotations.CapacityTimeout,
	annotations.Architectures, annotations.Rebalance, corev1.MirrorPodAnnotationKey}, strategy.PodAnnotations...)

// Ref names a workload object.
type Ref struct {
	Kind      string
	Namespace string
	Name      string
	UID       types.UID
}

func (r Ref) String() string { return r.Kind + " " + r.Namespace + "/" + r.Name }

// ObjectReference is r as the object an Event is about.
func (r Ref) ObjectReference() *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: r.UID}
}

// Info is what placement needs to know about a pod's workload.
type Info struct {
	// Workload is the object the user wrote the strategy on (the top of
	// the owner chain apportion follows).
	Workload Ref
	// Parent is the CronJob above a Job (zero otherwise): its annotations
	// and the policies targeting it apply after the Job's.
	Parent Ref
	// Revision is the pod-template-hash or controller-revision-hash.
	Revision string
	// Strategy is the raw strategy text and where it was found; Found is
	// false when the workload has none.
	Strategy string
	Source   strategy.Source
	Found    bool
	// Invalid is why the strategy is not valid ("" when it is, or when
	// nobody checked): a policy's is always checked; an annotation's only
	// with WithValidation (the placement controller parses it with its
	// cache, with the same parser).
	Invalid string
	// Skip is the apportion.dev/skip opt-out, on the pod or the workload.
	// SkipRefused is true when the workload opts out but the cluster
	// policy that places it does not allow that (allowSkip: false).
	Skip, SkipRefused bool
	// Mode is the placement mode (annotations.Mode*): the pod template's
	// apportion.dev/mode, else the workload's, else the PlacementPolicy's
	// spec.mode (when the strategy is the policy's), else the default
	// (WithDefaultMode, required unless given). Values out of range are
	// passed over. ModeSource says where it was set ("" for the
	// default).
	Mode, ModeSource string
	// Why says, with WithExplanations, why the source wins when policies
	// are in play: the policies it wins over, ties, a CronJob's policy.
	Why string
	// ArchitecturesAuto is apportion.dev/architectures: auto on the
	// workload or its pod template: place by architecture alone when there
	// is no strategy.
	ArchitecturesAuto bool
	// CapacityTimeout is apportion.dev/capacity-timeout as written on the
	// pod template or the workload (the template wins); "" when absent.
	CapacityTimeout string
	// Rebalance is apportion.dev/rebalance: "true" on the pod template or
	// the workload.
	Rebalance bool
	// Problems are the apportion.dev/* annotations of the workload, its
	// CronJob and its pod template that are out of range, unknown or
	// misplaced (annotations.Check), the pods' level first.
	Problems []annotations.Problem
}

// Preferred reports whether decisions are written as preferred terms.
func (i *Info) Preferred() bool { return i.Mode == annotations.ModePreferred }

// Shadow reports whether pods are decided without being changed: the
// decision is recorded in the apportion.dev/shadow annotation only.
func (i *Info) Shadow() bool { return i.Mode == annotations.ModeShadow }

// Policy is the policy that gives a workload its strategy.
type Policy struct {
	// Strategy is the raw strategy (the string syntax).
	Strategy string
	// Mode is the policy's spec.mode as written ("" when unset).
	Mode string
	// Name is the PlacementPolicy's "namespace/name", or the
	// ClusterPlacementPolicy's name.
	Name string
	// Cluster is true for a ClusterPlacementPolicy.
	Cluster bool
	// NoSkip is true when the policy does not let the workload opt out
	// with apportion.dev/skip (a cluster policy's allowSkip: false).
	NoSkip bool
	// Priority is a ClusterPlacementPolicy's spec.priority.
	Priority int32
	// Invalid is why the policy's strategy is not valid; "" when it is.
	Invalid string
}

// PolicySource finds the policies that may give a strategy to a workload
// (an annotation always wins): the PlacementPolicies of its namespace, then
// the ClusterPlacementPolicies.
type PolicySource interface {
	// Candidates returns the policies that may place the workload top
	// (GroupVersionKind, name, labels) in namespace, in the order they
	// win: the oldest PlacementPolicy targeting it (at most one), then the
	// ClusterPlacementPolicies covering it, highest-ranked first. It
	// reads only caches. The error is ErrNotCached (wrapped) when what it
	// needs to decide is not cached yet (and no PlacementPolicy decides);
	// it reports other read errors itself and answers without the
	// policies it could not read.
	Candidates(ctx context.Context, namespace string, top *metav1.PartialObjectMetadata) ([]Policy, error)
}

// Option changes how Resolve finds a strategy.
type Option func(*resolveOptions)

type resolveOptions struct {
	policies    PolicySource
	defaultMode string
	validate    bool
	explain     bool
	// Classify's alone.
	architectures ArchitecturePlacement
	check         func(raw string) error
}

// WithValidation makes Resolve parse an annotation's strategy too, and say
// why it is invalid in Info.Invalid (plan, explain and the policy statuses
// ask for it; placement parses through its own cache).
func WithValidation() Option {
	return func(o *resolveOptions) { o.validate = true }
}

// WithExplanations makes Resolve read every policy that may place the
// workload, even under its own annotation, and say in Info.Why what the
// winner wins over (plan and explain ask for it; the hot path does not).
func WithExplanations() Option {
	return func(o *resolveOptions) { o.explain = true }
}

// WithDefaultMode is the mode of workloads that name none (--default-mode):
// annotations.ModeRequired, ModePreferred or ModeShadow; any other value
// leaves the default, required.
func WithDefaultMode(mode string) Option {
	return func(o *resolveOptions) {
		if m, ok := annotations.ParseMode(mode); ok {
			o.defaultMode = m
		}
	}
}

// WithPolicies makes Resolve fall back to PlacementPolicies for workloads
// without a strategy annotation.
func WithPolicies(p PolicySource) Option {
	return func(o *resolveOptions) { o.policies = p }
}

// ErrNotCached is returned when an owner is not (yet) in the cache: the
// caller decides whether to wait or to let the pod go.
var ErrNotCached = errors.New("owner not in cache")

// OwnerKey is the identity pods are counted under: the controller owner's UID
// and, for StatefulSets (one owner for every revision), the revision. For
// Deployments and Rollouts each revision is its own ReplicaSet, so the
// ReplicaSet's UID is already per revision. A Job or a Workflow is counted
// as one owner, by its UID: each Job of a CronJob is its own. Empty for pods
// apportion does not follow.
func OwnerKey(pod metav1.Object) string {
	return ownerKey(pod, metav1.GetControllerOfNoCopy(pod))
}

// ownerKey is OwnerKey for the pod's controller owner.
func ownerKey(pod metav1.Object, owner *metav1.OwnerReference) string {
	switch {
	case owner == nil:
		return ""
	case Is(owner, ReplicaSetGVK), Is(owner, JobGVK), Is(owner, WorkflowGVK):
		return string(owner.UID)
	case Is(owner, StatefulSetGVK):
		return string(owner.UID) + "/" + pod.GetLabels()[appsv1.ControllerRevisionHashLabelKey]
	}
	return ""
}

// Is reports whether ref names an object of gvk's API group and kind, at any
// version. The kind alone is not enough: other projects reuse the names
// (OpenKruise's apps.kruise.io StatefulSet, for one), and their controllers
// behave differently.
func Is(ref *metav1.OwnerReference, gvk schema.GroupVersionKind) bool {
	if ref == nil || ref.Kind != gvk.Kind {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == gvk.Group
}

// Recreated reports whether the pod's controller is an apps/v1 ReplicaSet or
// StatefulSet, which makes a new pod when this one is deleted or evicted.
func Recreated(pod *corev1.Pod) bool {
	owner := metav1.GetControllerOfNoCopy(pod)
	return Is(owner, ReplicaSetGVK) || Is(owner, StatefulSetGVK)
}

// IsDaemonSetPod reports whether an apps/v1 DaemonSet controls the pod.
func IsDaemonSetPod(pod *corev1.Pod) bool {
	return Is(metav1.GetControllerOfNoCopy(pod), DaemonSetGVK)
}

// owners reads, from the caches, the workload at the top of the pod's owner
// chain and, for a CronJob's Job, the CronJob (parent, nil otherwise), and
// sets revision. top is nil for an owner apportion does not follow.
func owners(ctx context.Context, r client.Reader, namespace string, pod *corev1.Pod, owner *metav1.OwnerReference, revision *string) (top, parent *metav1.PartialObjectMetadata, err error) {
	switch {
	case Is(owner, ReplicaSetGVK):
		*revision = pod.Labels[PodTemplateHashLabel]
		rs, err := get(ctx, r, ReplicaSetGVK, namespace, owner.Name, owner.UID)
		if errors.Is(err, ErrNotCached) {
			if top = rolloutOwner(ctx, r, namespace, pod, owner); top != nil {
				return top, nil, nil
			}
		}
		if err != nil {
			return nil, nil, err
		}
		up := metav1.GetControllerOfNoCopy(rs)
		switch {
		case Is(up, DeploymentGVK):
			top, err = get(ctx, r, DeploymentGVK, namespace, up.Name, up.UID)
		case Is(up, RolloutGVK):
			top, err = get(ctx, r, RolloutGVK, namespace, up.Name, up.UID)
		default:
			top = rs
		}
		return top, nil, err
	case Is(owner, StatefulSetGVK):
		*revision = pod.Labels[appsv1.ControllerRevisionHashLabelKey]
		top, err = get(ctx, r, StatefulSetGVK, namespace, owner.Name, owner.UID)
		return top, nil, err
	case Is(owner, JobGVK):
		if top, err = get(ctx, r, JobGVK, namespace, owner.Name, owner.UID); err != nil {
			return nil, nil, err
		}
		// The Job is the workload (each Job of a CronJob is split on its
		// own); the CronJob only gives defaults.
		if up := metav1.GetControllerOfNoCopy(top); Is(up, CronJobGVK) {
			parent, err = get(ctx, r, CronJobGVK, namespace, up.Name, up.UID)
		}
		return top, parent, err
	case Is(owner, WorkflowGVK):
		top, err = get(ctx, r, WorkflowGVK, namespace, owner.Name, owner.UID)
		return top, nil, err
	}
	return nil, nil, nil
}

// rolloutLabel is the revision label Argo Rollouts sets on a Rollout's
// ReplicaSets and their pods.
const rolloutLabel = "rollouts-pod-template-hash"

// rolloutOwner finds the Deployment (or Argo Rollout) of a pod whose
// ReplicaSet the cache has not seen yet, as in the first moments of a
// rollout: that controller names each ReplicaSet after itself and the
// revision label it puts on the pods ("web-5d4f8b9c7" of Deployment "web",
// pod-template-hash "5d4f8b9c7"). It returns nil unless that owner is
// cached. The pod then resolves as it will once its ReplicaSet is cached,
// instead of being held for the leader only because its owner is new: a
// pod whose workload never opted in is never held. The guess stays within
// the pod's namespace and the leader resolves the pod again from its
// ReplicaSet.
func rolloutOwner(ctx context.Context, r client.Reader, namespace string, pod *corev1.Pod, owner *metav1.OwnerReference) *metav1.PartialObjectMetadata {
	for _, c := range [...]struct {
		gvk   schema.GroupVersionKind
		label string
	}{{DeploymentGVK, PodTemplateHashLabel}, {RolloutGVK, rolloutLabel}} {
		hash := pod.Labels[c.label]
		name, ok := strings.CutSuffix(owner.Name, "-"+hash)
		if hash == "" || !ok || name == "" {
			continue
		}
		if top, err := get(ctx, r, c.gvk, namespace, name, ""); err == nil {
			return top
		}
	}
	return nil
}

func get(ctx context.Context, r client.Reader, gvk schema.GroupVersionKind, namespace, name string, uid types.UID) (*metav1.PartialObjectMetadata, error) {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s %s/%s", ErrNotCached, gvk.Kind, namespace, name)
		}
		return nil, fmt.Errorf("getting %s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	if uid != "" && obj.UID != uid {
		// A newer object with the same name: the pod's owner is gone.
		return nil, fmt.Errorf("%w: %s %s/%s has uid %s, the pod's owner %s", ErrNotCached, gvk.Kind, namespace, name, obj.UID, uid)
	}
	obj.SetGroupVersionKind(gvk)
	return obj, nil
}

// ArchitecturesOptedIn reports whether a pod without a strategy asked to be
// placed by architecture: its pod template (the pod's own annotations) or
// its workload (info, nil for a bare pod) annotated, or its namespace
// labelled, apportion.dev/architectures: auto. The namespace is read from r
// (a metadata cache); a namespace that cannot be read has not opted in.
func ArchitecturesOptedIn(ctx context.Context, r client.Reader, namespace string, pod *corev1.Pod, info *Info) bool {
	if IsArchitecturesAuto(pod.Annotations[annotations.Architectures]) || (info != nil && info.ArchitecturesAuto) {
		return true
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := r.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return false
	}
	return IsArchitecturesAuto(ns.Labels[annotations.Architectures])
}

// ReasonInvalidAnnotation is the reason of the Warning Event naming a
// workload's out-of-range apportion.dev/* annotations.
const ReasonInvalidAnnotation = "InvalidAnnotation"

// DescribeProblems is the message of the InvalidAnnotation Event.
func DescribeProblems(problems []annotations.Problem) string {
	parts := make([]string, 0, len(problems))
	for _, p := range problems {
		if s := p.String(); !slices.Contains(parts, s) {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "; ")
}

// IsArchitecturesAuto reports whether v asks for architecture-only placement.
func IsArchitecturesAuto(v string) bool {
	return strings.EqualFold(strings.TrimSpace(v), annotations.ArchitecturesAuto)
}

func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// JobsByCronJob lists the Jobs of namespace (metadata only, from r's cache)
// and groups those a CronJob controls by the CronJob's UID.
func JobsByCronJob(ctx context.Context, r client.Reader, namespace string) (map[types.UID][]*metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(JobGVK.GroupVersion().WithKind("JobList"))
	if err := r.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing jobs of %s: %w", namespace, err)
	}
	jobs := map[types.UID][]*metav1.PartialObjectMetadata{}
	for i := range list.Items {
		job := &list.Items[i]
		job.SetGroupVersionKind(JobGVK)
		if up := metav1.GetControllerOfNoCopy(job); Is(up, CronJobGVK) {
			jobs[up.UID] = append(jobs[up.UID], job)
		}
	}
	return jobs, nil
}
