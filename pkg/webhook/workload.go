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

// WorkloadValidator rejects Deployments, StatefulSets, ReplicaSets and Argo
// Rollouts whose strategy does not parse, with the parser's message, so that
// `kubectl apply` fails where the mistake is made. It reads only the
// annotations of the object and of its pod template, which these four kinds
// keep at the same paths.
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

type workloadAnnotations struct {
	Metadata struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		} `json:"template"`
	} `json:"spec"`
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
	raw, src, ok := strategy.Find(w.Metadata.Annotations, w.Spec.Template.Metadata.Annotations)
	if ok {
		if _, err := strategy.Parse(raw); err != nil {
			return admission.Denied(src.String() + ": " + err.Error())
		}
	}
	optedIn := scope.OptedIn(w.Metadata.Annotations) || scope.OptedIn(w.Spec.Template.Metadata.Annotations)
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
	for _, p := range annotations.Check(w.Metadata.Annotations) {
		warnings = append(warnings, "apportion: metadata.annotations["+p.Key+"]: "+p.Detail())
	}
	for _, p := range annotations.Check(w.Spec.Template.Metadata.Annotations) {
		warnings = append(warnings, "apportion: spec.template.metadata.annotations["+p.Key+"]: "+p.Detail())
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
