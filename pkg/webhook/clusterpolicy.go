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

// ClusterPolicyValidatorPath is where the ClusterPlacementPolicy validator
// is served.
const ClusterPolicyValidatorPath = "/validate-apportion-clusterplacementpolicies"

// ClusterPolicyValidator rejects ClusterPlacementPolicies whose strategy
// does not parse, with the parser's message, and selectors that are not
// valid label selectors. It fails open, as the other validators do.
//
// With a Marker (the chart's scoped pod webhook), every namespace a valid
// policy covers is labelled before the policy is admitted, so that the
// pods created from then on reach the pod webhook; a namespace covered later
// is labelled when a covered workload is admitted there, or by the sweep.
type ClusterPolicyValidator struct {
	Marker   *scope.Marker
	Clusters *policy.Source
}

var _ admission.Handler = ClusterPolicyValidator{}

// Handle implements admission.Handler.
func (v ClusterPolicyValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var p v1alpha1.ClusterPlacementPolicy
	if err := json.Unmarshal(req.Object.Raw, &p); err != nil {
		log.FromContext(ctx).Error(err, "decoding cluster placement policy, admitting it", "name", req.Name)
		return admission.Allowed("")
	}
	if _, err := policy.ClusterStrategy(&p.Spec); err != nil {
		return admission.Denied(err.Error())
	}
	if _, err := metav1.LabelSelectorAsSelector(&p.Spec.NamespaceSelector); err != nil {
		return admission.Denied("spec.namespaceSelector: " + err.Error())
	}
	if sel := p.Spec.Target.Selector; sel != nil {
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			return admission.Denied("spec.target.selector: " + err.Error())
		}
	}
	if !ptr.Deref(req.DryRun, false) {
		// Not the cache's object: its selectors are compiled afresh.
		p.UID = ""
		if err := v.Marker.MarkCovered(ctx, v.Clusters, &p); err != nil {
			log.FromContext(ctx).Error(err, "admitting the cluster placement policy, some namespaces it covers unlabelled", "name", req.Name)
		}
	}
	return admission.Allowed("")
}
