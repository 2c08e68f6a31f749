package plan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// WorkloadPreview is one workload of a preview of manifests: where its
// strategy comes from, its mode and its split, or why apportion would not
// place it. Its JSON form is an entry of the "workloads" of
// `apportion plan -f -o json`: these fields, then the Result's.
type WorkloadPreview struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Replicas  int    `json:"replicas"`
	// Source says where the strategy comes from, as explain says it: an
	// annotation of the workload or its pod template, "PlacementPolicy
	// namespace/name" or "ClusterPlacementPolicy name".
	Source string `json:"source,omitempty"`
	Mode   string `json:"mode,omitempty"`
	// NotPlaced says why apportion would leave the workload's pods alone
	// (no strategy, an opt-out); "" when it places them.
	NotPlaced string `json:"notPlaced,omitempty"`
	// Error says why there is no preview of a strategy that applies: it
	// is invalid, or no NodePool serves any of its groups.
	Error string `json:"error,omitempty"`
	// Result is the split, nil without one.
	*Result
}

func (p *WorkloadPreview) String() string { return p.Kind + " " + p.Namespace + "/" + p.Name }

// noStrategy is why a workload nothing places is not placed, as explain
// says it.
const noStrategy = "no strategy: no " + annotations.Strategy + " annotation on the workload or its pod template, and no PlacementPolicy or ClusterPlacementPolicy applies to it"

// Preview previews every workload of m, in the order read, as the webhook
// resolves it (workload.Resolve with the policy source, over m's objects
// instead of the caches): its own annotation, else the oldest
// PlacementPolicy of its namespace targeting it, else the highest-ranked
// ClusterPlacementPolicy covering its namespace by the namespace's labels
// (policies with no creationTimestamp are as old as each other: the first
// by name wins). replicas, when not negative, replaces every workload's
// spec.replicas; cat, when set, maps groups to NodePools.
func (m *Manifests) Preview(replicas int, cat *catalog.Catalog) ([]WorkloadPreview, error) {
	r, tops, err := m.reader()
	if err != nil {
		return nil, err
	}
	ctx := log.IntoContext(context.Background(), logr.Discard())
	src := policy.NewSource(r).WithClusterPolicies(nil)
	out := make([]WorkloadPreview, len(m.Workloads))
	for i, w := range m.Workloads {
		p := &out[i]
		*p = WorkloadPreview{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, Replicas: int(ptr.Deref(w.Replicas, 1))}
		if replicas >= 0 {
			p.Replicas = replicas
		}
		info, err := workload.Resolve(ctx, r, w.Namespace, podOf(w, tops[i]), workload.WithPolicies(src))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if info.Found {
			p.Source = info.Source.String()
			if w.Kind == "Workflow" && info.Source.Template {
				// Where a Workflow's pods get their annotations.
				p.Source = "spec.podMetadata.annotations[" + info.Source.Annotation + "]"
			}
		}
		p.Mode = info.Mode
		switch {
		case info.Skip:
			p.NotPlaced = "opted out (" + annotations.Skip + `: "true")`
			continue
		case !info.Found && info.ArchitecturesAuto:
			p.NotPlaced = "no strategy: placed by architecture alone (" + annotations.Architectures + ": " + annotations.ArchitecturesAuto + ")"
			continue
		case !info.Found:
			p.NotPlaced = noStrategy
			continue
		}
		s, err := strategy.Parse(info.Strategy)
		if err != nil {
			p.Error = p.Source + ": " + err.Error()
			continue
		}
		res, err := Summarize(s, p.Replicas, Options{Catalog: cat, Pod: &corev1.Pod{ObjectMeta: w.Template.ObjectMeta, Spec: w.Template.Spec}})
		if err != nil {
			p.Error = err.Error()
			continue
		}
		res.KeepFirst(PreviewPods)
		res.Source, res.Mode = p.Source, p.Mode
		p.Result = res
	}
	return out, nil
}

// topGVK is the GroupVersionKind Resolve reads each workload kind as.
var topGVK = map[string]schema.GroupVersionKind{
	"Deployment":  workload.DeploymentGVK,
	"StatefulSet": workload.StatefulSetGVK,
	"ReplicaSet":  workload.ReplicaSetGVK,
	"Rollout":     workload.RolloutGVK,
	"Job":         workload.JobGVK,
	"CronJob":     workload.CronJobGVK,
	"Workflow":    workload.WorkflowGVK,
}

// reader holds m's objects as the informer caches would: the workloads'
// metadata (and, for a Deployment or Rollout, a ReplicaSet it controls, the
// owner of its pods), the policies with their index, and every namespace
// with its labels (and kubernetes.io/metadata.name, which the API server
// sets). It returns the owner of each workload's pods, in m.Workloads
// order.
func (m *Manifests) reader() (*memcache.Reader, []*metav1.PartialObjectMetadata, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	r := memcache.New(scheme)
	if err := r.Index(&v1alpha1.PlacementPolicy{}, policy.IndexTarget, policy.TargetIndex); err != nil {
		return nil, nil, err
	}
	var objs []client.Object
	for _, p := range m.Policies {
		objs = append(objs, p)
	}
	for _, p := range m.ClusterPolicies {
		objs = append(objs, p)
	}
	namespaces := map[string]map[string]string{}
	for name, l := range m.Namespaces {
		namespaces[name] = l
	}
	owners := make([]*metav1.PartialObjectMetadata, len(m.Workloads))
	for i, w := range m.Workloads {
		if _, ok := namespaces[w.Namespace]; !ok {
			namespaces[w.Namespace] = nil
		}
		top := meta(topGVK[w.Kind], w.Namespace, w.Name, types.UID("workload-"+strconv.Itoa(i)))
		top.Labels, top.Annotations = w.Labels, w.Annotations
		owners[i] = top
		objs = append(objs, top)
		if w.Kind == "CronJob" {
			// One of its Jobs, as the CronJob controller makes it.
			job := meta(workload.JobGVK, w.Namespace, w.Name+"/job", top.UID+"-job")
			job.Annotations = w.JobAnnotations
			job.OwnerReferences = []metav1.OwnerReference{controllerRef(top)}
			owners[i] = job
			objs = append(objs, job)
		}
		if w.Kind == "Deployment" || w.Kind == "Rollout" {
			// A name no object can have ('/'): the ReplicaSet is
			// this preview's own.
			rs := meta(workload.ReplicaSetGVK, w.Namespace, w.Name+"/replicaset", top.UID+"-rs")
			rs.OwnerReferences = []metav1.OwnerReference{controllerRef(top)}
			owners[i] = rs
			objs = append(objs, rs)
		}
	}
	for name, l := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelMetadataName: name}}}
		for k, v := range l {
			ns.Labels[k] = v
		}
		objs = append(objs, ns)
	}
	return r, owners, r.Add(objs...)
}

func meta(gvk schema.GroupVersionKind, namespace, name string, uid types.UID) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid}}
	o.SetGroupVersionKind(gvk)
	return o
}

func controllerRef(o *metav1.PartialObjectMetadata) metav1.OwnerReference {
	gvk := o.GroupVersionKind()
	return metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: o.Name, UID: o.UID, Controller: ptr.To(true)}
}

// podOf is a pod of w's template as its controller creates it: the
// template's labels and annotations, owned by owner.
func podOf(w *Workload, owner *metav1.PartialObjectMetadata) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Labels: w.Template.Labels, Annotations: w.Template.Annotations,
		OwnerReferences: []metav1.OwnerReference{controllerRef(owner)}}, Spec: w.Template.Spec}
}

// WritePreviewsJSON writes previews as one indented JSON object,
// {"workloads": [...]}, marshalled one workload at a time.
func WritePreviewsJSON(w io.Writer, previews []WorkloadPreview) error {
	return writePreviewsJSON(w, previews)
}

// Previews is the JSON and YAML form of a preview of manifests.
type Previews struct {
	Workloads []WorkloadPreview `json:"workloads"`
}

// WritePreviews writes previews for a person: per workload its name, then
// its table (WriteTable, or WriteWide when wide) or why it has none.
func WritePreviews(w io.Writer, previews []WorkloadPreview, wide bool) error {
	for i := range previews {
		p := &previews[i]
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s\n", p)
		var err error
		switch {
		case p.Result != nil && wide:
			err = p.WriteWide(w)
		case p.Result != nil:
			err = p.WriteTable(w)
		case p.Error != "":
			_, err = fmt.Fprintf(w, "replicas:  %d\nerror:     %s\n", p.Replicas, p.Error)
		default:
			_, err = fmt.Fprintf(w, "replicas:    %d\nnot placed:  %s\n", p.Replicas, p.NotPlaced)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Failures are the previews that have an error, one line each.
func Failures(previews []WorkloadPreview) []string {
	var out []string
	for i := range previews {
		if previews[i].Error != "" {
			out = append(out, previews[i].String()+": "+previews[i].Error)
		}
	}
	return out
}

// ErrNoWorkload is returned when manifests hold no workload to preview.
var ErrNoWorkload = errors.New("no Deployment, StatefulSet, ReplicaSet, Argo Rollout, Job or CronJob in the input")

// LeftOut says, one line per group, which groups of the split no NodePool
// serves.
func (r *Result) LeftOut() []string {
	var out []string
	for i, g := range r.Details {
		if g.Unavailable != "" {
			out = append(out, fmt.Sprintf("group %d (%s): %s", i, g.Key, g.Unavailable))
		}
	}
	return out
}
