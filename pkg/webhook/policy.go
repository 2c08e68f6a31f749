package webhook

import (
	"context"
	"encoding/json"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/scope"
)

// PolicyValidatorPath is where the PlacementPolicy validator is served.
const PolicyValidatorPath = "/validate-apportion-placementpolicies"

// PolicyValidator rejects PlacementPolicies whose strategy does not parse,
// with the parser's message and the field it comes from, and target
// selectors that are not valid label selectors. The CRD's schema checks the
// rest (forms, enums, minimums). Like the workload validator it fails open:
// a request it cannot decode is admitted.
//
// With a Marker (the chart's scoped pod webhook), a valid policy has its
// namespace labelled before it is admitted: the pods of the workloads it
// targets carry nothing that says so.
type PolicyValidator struct {
	Marker *scope.Marker
}

var _ admission.Handler = PolicyValidator{}

// Handle implements admission.Handler.
func (v PolicyValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var p v1alpha1.PlacementPolicy
	if err := json.Unmarshal(req.Object.Raw, &p); err != nil {
		log.FromContext(ctx).Error(err, "decoding placement policy, admitting it", "namespace", req.Namespace, "name", req.Name)
		return admission.Allowed("")
	}
	if _, err := policy.Strategy(&p.Spec); err != nil {
		return admission.Denied(err.Error())
	}
	if sel := p.Spec.Target.Selector; sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return admission.Denied("spec.target.selector: " + err.Error())
		}
		if s.Empty() {
			return admission.Denied("spec.target.selector: an empty selector would match every workload of the namespace: name the labels")
		}
	}
	if !ptr.Deref(req.DryRun, false) {
		if err := v.Marker.Mark(ctx, req.Namespace); err != nil {
			log.FromContext(ctx).Error(err, "admitting the placement policy, its namespace unlabelled", "namespace", req.Namespace, "name", req.Name)
		}
	}
	return admission.Allowed("")
}
