package webhook

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	return policyCheck[v1alpha1.PlacementPolicy]{
		kind: "placement policy", keys: []any{"namespace", req.Namespace, "name", req.Name},
		validate: validatePolicy,
		mark: func(ctx context.Context, _ *v1alpha1.PlacementPolicy) error {
			return v.Marker.Mark(ctx, req.Namespace)
		},
		unmarked: "admitting the placement policy, its namespace unlabelled",
	}.handle(ctx, req)
}

// validatePolicy returns why p is denied, nil when it is valid.
func validatePolicy(p *v1alpha1.PlacementPolicy) error {
	if _, err := policy.Strategy(&p.Spec); err != nil {
		return err
	}
	if sel := p.Spec.Target.Selector; sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return fmt.Errorf("spec.target.selector: %w", err)
		}
		if s.Empty() {
			return errors.New("spec.target.selector: an empty selector would match every workload of the namespace: name the labels")
		}
	}
	return nil
}
