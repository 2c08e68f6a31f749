package policy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Observer is the status engine of both policy kinds: what the status of a
// PlacementPolicy or a ClusterPlacementPolicy says of a workload, it asks
// the question placement asks. Who places the workload is
// workload.ResolveChain's answer with the Source, never a precedence of
// its own, so that a status says what the webhook does. Besides, it reads
// the workload's replicas and the node labels of its Running pods. What it
// does not read it resolves without: the pod template of a Job or Workflow
// with no live pod, and, without WithUncachedSpecs, a Rollout's.
//
// It reads caches only: the workloads' metadata, the typed apps/v1 objects
// for spec.replicas and the pod template's annotations, the pods through
// the index by controller (podcache.IndexController: the pods of the
// workloads asked about, never a namespace's), the nodes' metadata. An
// Observer serves one reconcile, one goroutine: it keeps a namespace's
// ReplicaSets and Jobs, and each node's labels, once read.
type Observer struct {
	reader   client.Reader
	source   *Source
	signer   *decision.Signer
	uncached bool

	// Of the namespace last read: the ReplicaSets of each Deployment or
	// Rollout, the Jobs of each CronJob, listed when first needed.
	namespace   string
	replicaSets map[types.UID][]types.UID
	jobs        map[types.UID][]*metav1.PartialObjectMetadata
	nodes       map[string]map[string]string
}

// NewObserver reads through reader (the manager's cached client, with the
// pod index by controller) and resolves with source.
func NewObserver(reader client.Reader, source *Source) *Observer {
	return &Observer{reader: reader, source: source, nodes: map[string]map[string]string{}}
}

// WithUncachedSpecs makes the Observer read the spec of a kind the cache
// holds no typed object of (an Argo Rollout) too, from the API server. A
// PlacementPolicy targets few workloads; a cluster policy covers many, and
// leaves a Rollout's pod template and replicas unread.
func (x *Observer) WithUncachedSpecs() *Observer {
	x.uncached = true
	return x
}

// WithSigner makes the Observer recognise the pods released beyond caps
// by s, the placement controller's Signer (nil: none is recognised, and
// every Running pod counts by its node).
func (x *Observer) WithSigner(s *decision.Signer) *Observer {
	x.signer = s
	return x
}

// Observed is one workload as the resolver answers for it.
type Observed struct {
	Top *metav1.PartialObjectMetadata
	// Info is what places the workload. A CronJob's is that of a Job of
	// it with nothing of its own: what its next Job gets.
	Info *workload.Info
	// Gone is true when the workload's spec is no longer cached.
	Gone bool
	// Replicas is spec.replicas (0 when it is not read), or a batch
	// workload's live pods: a CronJob's, those of its Jobs placed as the
	// CronJob is.
	Replicas int64

	batch bool
	// pods are a batch workload's live pods counted in Replicas.
	pods []corev1.Pod
}

// PlacedBy reports whether the policy named name places the workload: a
// PlacementPolicy's "namespace/name", a ClusterPlacementPolicy's name with
// cluster. A workload that opts out is placed by nothing.
func (o *Observed) PlacedBy(name string, cluster bool) bool {
	i := o.Info
	return i.Found && !i.Skip && i.Source.Policy == name && i.Source.Cluster == cluster
}

// Observe resolves the workload top (metadata with its GroupVersionKind)
// and reads its replicas.
func (x *Observer) Observe(ctx context.Context, top *metav1.PartialObjectMetadata) (*Observed, error) {
	x.enter(top.Namespace)
	switch top.GroupVersionKind() {
	case workload.CronJobGVK:
		return x.cronJob(ctx, top)
	case workload.JobGVK:
		parent, err := x.cronJobOf(ctx, top)
		if err != nil {
			return nil, err
		}
		return x.batch(ctx, top, parent)
	case workload.WorkflowGVK:
		return x.batch(ctx, top, nil)
	}
	return x.replicated(ctx, top)
}

// replicated observes a Deployment, StatefulSet, ReplicaSet or Rollout:
// its annotations, then its pod template's.
func (x *Observer) replicated(ctx context.Context, top *metav1.PartialObjectMetadata) (*Observed, error) {
	o := &Observed{Top: top}
	var template map[string]string
	if gvk := top.GroupVersionKind(); x.uncached || gvk.Group == workload.DeploymentGVK.Group {
		spec, err := workload.ReadSpec(ctx, x.reader, gvk, client.ObjectKeyFromObject(top))
		switch {
		case apierrors.IsNotFound(err):
			o.Gone = true
		case err != nil:
			return nil, fmt.Errorf("getting %s %s/%s: %w", gvk.Kind, top.Namespace, top.Name, err)
		default:
			template, o.Replicas = spec.Template, int64(spec.Replicas)
		}
	}
	var err error
	o.Info, err = x.resolve(ctx, workload.Chain{Top: top, Template: template})
	return o, err
}

// batch observes a Job (parent: its CronJob, or nil) or a Workflow: its
// pods' annotations, which are their template's, come first.
func (x *Observer) batch(ctx context.Context, top, parent *metav1.PartialObjectMetadata) (*Observed, error) {
	pods, err := x.livePods(ctx, top)
	if err != nil {
		return nil, err
	}
	info, err := x.resolve(ctx, workload.Chain{Top: top, Parent: parent, Template: podAnnotations(pods)})
	if err != nil {
		return nil, err
	}
	return &Observed{Top: top, Info: info, Replicas: int64(len(pods)), batch: true, pods: pods}, nil
}

// cronJob observes a CronJob through its Jobs, each resolved under it: the
// CronJob is placed as a Job of it with no annotation, label or policy of
// its own would be, and its replicas are the live pods of the Jobs placed
// that way. A Job with a strategy or an opt-out of its own, or that a
// policy targets or covers as a Job, is not the CronJob's.
func (x *Observer) cronJob(ctx context.Context, cron *metav1.PartialObjectMetadata) (*Observed, error) {
	next := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: cron.Namespace}}
	next.SetGroupVersionKind(workload.JobGVK)
	info, err := x.resolve(ctx, workload.Chain{Top: next, Parent: cron})
	if err != nil {
		return nil, err
	}
	o := &Observed{Top: cron, batch: true}
	jobs, err := x.jobsOf(ctx, cron.UID)
	if err != nil {
		return nil, err
	}
	for _, job := range jobs {
		j, err := x.batch(ctx, job, cron)
		if err != nil {
			return nil, err
		}
		if sameAnswer(j.Info, info) {
			o.Replicas += j.Replicas
			o.pods = append(o.pods, j.pods...)
		}
	}
	// Said of the CronJob: its annotation is its own, not its parent's.
	own := *info
	own.Workload, own.Parent = info.Parent, workload.Ref{}
	if own.Source.Owner == cron.GroupVersionKind().Kind+" "+cron.Name {
		own.Source.Owner = ""
	}
	o.Info = &own
	return o, nil
}

// sameAnswer reports whether two resolutions place alike: the same source,
// and the same opt-out.
func sameAnswer(a, b *workload.Info) bool {
	return a.Found == b.Found && a.Skip == b.Skip && (!a.Found || a.Source == b.Source)
}

func (x *Observer) resolve(ctx context.Context, chain workload.Chain) (*workload.Info, error) {
	return workload.ResolveChain(ctx, chain.Top.Namespace, chain, workload.WithPolicies(x.source.OrNil()), workload.WithValidation())
}

// cronJobOf is the CronJob that controls the Job, from the metadata cache;
// nil when none does (or it is gone).
func (x *Observer) cronJobOf(ctx context.Context, job *metav1.PartialObjectMetadata) (*metav1.PartialObjectMetadata, error) {
	up := metav1.GetControllerOfNoCopy(job)
	if !workload.Is(up, workload.CronJobGVK) {
		return nil, nil
	}
	cron := metadataOf(workload.CronJobGVK)
	if err := x.reader.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: up.Name}, cron); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting CronJob %s/%s: %w", job.Namespace, up.Name, err)
	}
	if cron.UID != up.UID {
		return nil, nil
	}
	cron.SetGroupVersionKind(workload.CronJobGVK)
	return cron, nil
}

func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return obj
}
