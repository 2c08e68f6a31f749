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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// WorkloadPreview is one workload of a preview of manifests: where its
// strategy comes from, its mode and its split, or why apportion would not
// place it. Its JSON form is an entry of the "workloads" of
// `apportion plan -f -o json`: these fields, then the Result's. The fields
// of the resolution (strategy to problems) are explain's for the same
// objects.
type WorkloadPreview struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Replicas  int    `json:"replicas"`
	// Strategy is the strategy that applies, as written (a policy's in
	// its canonical form).
	Strategy string `json:"strategy,omitempty"`
	// Source says where the strategy comes from, as explain says it: an
	// annotation of the workload or its pod template, "PlacementPolicy
	// namespace/name" or "ClusterPlacementPolicy name"; Why why it wins
	// when policies are in play.
	Source     string `json:"source,omitempty"`
	Why        string `json:"why,omitempty"`
	Mode       string `json:"mode,omitempty"`
	ModeSource string `json:"modeSource,omitempty"`
	// NotPlaced says why apportion would leave the workload's pods alone
	// (no strategy, an invalid one, an opt-out); "" when it places them.
	NotPlaced string `json:"notPlaced,omitempty"`
	// Invalid is the fault of an invalid strategy; Problems the
	// apportion.dev/* annotations not taken as written. Either makes
	// the preview fail (exit status 2).
	Invalid  string   `json:"invalid,omitempty"`
	Problems []string `json:"problems,omitempty"`
	// Error says why there is no preview of a valid strategy: no
	// NodePool serves any of its groups.
	Error string `json:"error,omitempty"`
	// Result is the split, nil without one.
	*Result
}

func (p *WorkloadPreview) String() string { return p.Kind + " " + p.Namespace + "/" + p.Name }

// setAnswer copies the resolution's words into p.
func (p *WorkloadPreview) setAnswer(a workload.Answer) {
	p.Strategy, p.Source, p.Why, p.Mode, p.ModeSource = a.Strategy, a.Source, a.Why, a.Mode, a.ModeSource
	p.NotPlaced, p.Invalid, p.Problems = a.NotPlaced, a.Invalid, a.Problems
}

// Preview previews every workload of m, in the order read, as the webhook
// resolves it (workload.ResolveChain with the policy source, over m's
// objects instead of the caches): its own annotation, else the oldest
// PlacementPolicy of its namespace targeting it, else the highest-ranked
// ClusterPlacementPolicy covering its namespace by the namespace's labels
// (policies with no creationTimestamp are as old as each other: the first
// by name wins). replicas, when not negative, replaces every workload's
// spec.replicas; cat, when set, maps groups to NodePools.
func (m *Manifests) Preview(replicas int, cat *catalog.Catalog) ([]WorkloadPreview, error) {
	namespaces := map[string]map[string]string{}
	for name, l := range m.Namespaces {
		namespaces[name] = l
	}
	for _, w := range m.Workloads {
		if _, ok := namespaces[w.Namespace]; !ok {
			namespaces[w.Namespace] = nil
		}
	}
	src, err := policy.Static(m.Policies, m.ClusterPolicies, namespaces, nil)
	if err != nil {
		return nil, err
	}
	ctx := log.IntoContext(context.Background(), logr.Discard())
	out := make([]WorkloadPreview, len(m.Workloads))
	for i, w := range m.Workloads {
		p := &out[i]
		*p = WorkloadPreview{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, Replicas: int(ptr.Deref(w.Replicas, 1))}
		if replicas >= 0 {
			p.Replicas = replicas
		}
		chain := w.Chain(types.UID("workload-" + strconv.Itoa(i)))
		info, err := workload.ResolveChain(ctx, w.Namespace, chain, workload.WithPolicies(src), workload.WithValidation(), workload.WithExplanations())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		p.setAnswer(info.Answer(&chain))
		if p.NotPlaced != "" {
			continue
		}
		s, err := strategy.Parse(info.Strategy)
		if err != nil {
			continue // reported as Invalid
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

// Chain is w as resolution reads it. A CronJob is resolved as one of its
// Jobs, which the CronJob controller makes with the jobTemplate's metadata:
// that Job carries the CronJob's name here.
func (w *Workload) Chain(uid types.UID) workload.Chain {
	top := meta(topGVK[w.Kind], w.Namespace, w.Name, uid)
	top.Labels, top.Annotations = w.Labels, w.Annotations
	c := workload.Chain{Top: top, Template: w.Template.Annotations}
	switch w.Kind {
	case "CronJob":
		job := meta(workload.JobGVK, w.Namespace, w.Name, uid+"-job")
		job.Labels, job.Annotations = w.JobLabels, w.JobAnnotations
		job.OwnerReferences = []metav1.OwnerReference{controllerRef(top)}
		c.Top, c.Parent = job, top
	case "Workflow":
		c.TemplateAt = "spec.podMetadata.annotations"
	}
	return c
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
		case p.Invalid != "":
			_, err = fmt.Fprintf(w, "replicas:  %d\nsource:    %s\nerror:     %s\n", p.Replicas, p.Source, p.Invalid)
		default:
			_, err = fmt.Fprintf(w, "replicas:    %d\nnot placed:  %s\n", p.Replicas, p.NotPlaced)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Failures are the previews that have an error, an invalid strategy or
// problems in their annotations, one line each.
func Failures(previews []WorkloadPreview) []string {
	var out []string
	for i := range previews {
		p := &previews[i]
		if p.Invalid != "" {
			out = append(out, p.String()+": "+p.Source+": "+p.Invalid)
		}
		for _, problem := range p.Problems {
			out = append(out, p.String()+": "+problem)
		}
		if p.Error != "" {
			out = append(out, p.String()+": "+p.Error)
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
