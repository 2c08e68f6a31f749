package webhook

import (
	"context"
	"encoding/json"
	"errors"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/scope"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// WorkloadValidatorPath is where the workload validator is served.
const WorkloadValidatorPath = "/validate-apportion-workloads"

// WorkloadValidator rejects Deployments, StatefulSets, ReplicaSets, Argo
// Rollouts, Jobs, CronJobs and Argo Workflows whose strategy does not parse,
// with the parser's message, so that `kubectl apply` fails where the mistake
// is made. It reads only annotations: the object's, its pod template's
// (spec.template), a CronJob's jobTemplate and its pod template's, and a
// Workflow's spec.podMetadata.
//
// With a Marker (the chart's scoped pod webhook), a workload that opts in
// (a valid strategy, or apportion.dev/architectures: auto, on the workload
// or its pod template) has its namespace labelled before it is admitted, so
// that its first pods reach the pod webhook; so does a workload a
// ClusterPlacementPolicy covers (Clusters), as its namespace's and its own
// labels are when it is admitted.
type WorkloadValidator struct {
	Marker   *scope.Marker
	Clusters *policy.Source
}

var _ admission.Handler = WorkloadValidator{}

type annotated struct {
	Annotations map[string]string `json:"annotations"`
}

type workloadAnnotations struct {
	Metadata struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Template struct {
			Metadata annotated `json:"metadata"`
		} `json:"template"`
		// A CronJob's.
		JobTemplate struct {
			Metadata annotated `json:"metadata"`
			Spec     struct {
				Template struct {
					Metadata annotated `json:"metadata"`
				} `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"`
		// An Argo Workflow's: Argo copies it onto each pod.
		PodMetadata annotated `json:"podMetadata"`
	} `json:"spec"`
}

// level is one place of a workload where apportion's annotations are read.
type level struct {
	path        string
	annotations map[string]string
}

// levels are w's annotations by path, in the order they are checked.
func (w *workloadAnnotations) levels() []level {
	return []level{
		{"metadata.annotations", w.Metadata.Annotations},
		{"spec.template.metadata.annotations", w.Spec.Template.Metadata.Annotations},
		{"spec.jobTemplate.metadata.annotations", w.Spec.JobTemplate.Metadata.Annotations},
		{"spec.jobTemplate.spec.template.metadata.annotations", w.Spec.JobTemplate.Spec.Template.Metadata.Annotations},
		{"spec.podMetadata.annotations", w.Spec.PodMetadata.Annotations},
	}
}

// Handle implements admission.Handler.
func (v WorkloadValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var w workloadAnnotations
	if err := json.Unmarshal(req.Object.Raw, &w); err != nil {
		log.FromContext(ctx).Error(err, "decoding workload, admitting it", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name)
		return admission.Allowed("")
	}
	optedIn := false
	for _, l := range w.levels() {
		// Each level is checked: a batch pod may take its strategy from
		// any of them.
		if raw, src, ok := strategy.Find(l.annotations, nil); ok {
			if _, err := strategy.Parse(raw); err != nil {
				return admission.Denied(l.path + "[" + src.Annotation + "]: " + err.Error())
			}
		}
		optedIn = optedIn || scope.OptedIn(l.annotations)
	}
	if !optedIn && v.Marker != nil {
		optedIn = v.covered(ctx, req, w.Metadata.Labels)
	}
	if optedIn && !ptr.Deref(req.DryRun, false) {
		// Failing open: the workload is admitted, and the pods its
		// template does not mark reach the pod webhook once the sweep
		// labels the namespace.
		if err := v.Marker.Mark(ctx, req.Namespace); err != nil {
			log.FromContext(ctx).Error(err, "admitting the workload, its namespace unlabelled", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name)
		}
	}
	// The other knobs are warned about, not refused: each has a safe
	// default that apportion uses instead.
	var warnings []string
	for _, l := range w.levels() {
		for _, p := range annotations.Check(l.annotations) {
			warnings = append(warnings, "apportion: "+l.path+"["+p.Key+"]: "+p.Detail())
		}
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// covered reports whether a ClusterPlacementPolicy covers the workload. A
// namespace the cache does not hold yet (created a moment ago) counts as
// covered when there are cluster policies: its label only costs its pods a
// webhook call, and its first pods must not miss the policy.
func (v WorkloadValidator) covered(ctx context.Context, req admission.Request, labels map[string]string) bool {
	top := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name, Labels: labels}}
	top.SetGroupVersionKind(schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind})
	ranked, err := v.Clusters.Covering(ctx, req.Namespace, top)
	switch {
	case errors.Is(err, workload.ErrNotCached):
		return true
	case err != nil:
		log.FromContext(ctx).Error(err, "reading cluster placement policies, the namespace left as it is", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name)
		return false
	}
	return len(ranked) > 0
}
