package webhook

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// pods created from then on reach the pod webhook; a namespace covered later,
// or one this replica's cache did not hold yet, is labelled by the leader's
// watches of namespaces and cluster policies (scope.Marker.Covering), when
// a covered workload is admitted there, or by the sweep.
type ClusterPolicyValidator struct {
	Marker   *scope.Marker
	Clusters *policy.Source
}

var _ admission.Handler = ClusterPolicyValidator{}

// Handle implements admission.Handler.
func (v ClusterPolicyValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return policyCheck[v1alpha1.ClusterPlacementPolicy]{
		kind: "cluster placement policy", keys: []any{"name", req.Name},
		validate: validateClusterPolicy,
		mark: func(ctx context.Context, p *v1alpha1.ClusterPlacementPolicy) error {
			// Not the cache's object: its selectors are compiled afresh.
			p.UID = ""
			return v.Marker.MarkCovered(ctx, v.Clusters, p)
		},
		unmarked: "admitting the cluster placement policy, some namespaces it covers unlabelled",
	}.handle(ctx, req)
}

// validateClusterPolicy returns why p is denied, nil when it is valid.
func validateClusterPolicy(p *v1alpha1.ClusterPlacementPolicy) error {
	if _, err := policy.ClusterStrategy(&p.Spec); err != nil {
		return err
	}
	if _, err := metav1.LabelSelectorAsSelector(&p.Spec.NamespaceSelector); err != nil {
		return fmt.Errorf("spec.namespaceSelector: %w", err)
	}
	if sel := p.Spec.Target.Selector; sel != nil {
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			return fmt.Errorf("spec.target.selector: %w", err)
		}
	}
	return nil
}
