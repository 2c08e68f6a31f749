package test

import (
	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// NodePoolOptions say what NodePool builds.
type NodePoolOptions struct {
	metav1.ObjectMeta
	// Weight, when not zero, is the NodePool's weight.
	Weight int32
	// Requirements are the NodePool's template requirements.
	Requirements []karpv1.NodeSelectorRequirementWithMinValues
	// Ready, when set, is the status of the NodePool's Ready condition.
	Ready metav1.ConditionStatus
}

// NodePool is a Karpenter NodePool as o says.
func NodePool(o NodePoolOptions) *karpv1.NodePool {
	np := &karpv1.NodePool{ObjectMeta: o.ObjectMeta}
	if o.Weight != 0 {
		np.Spec.Weight = &o.Weight
	}
	np.Spec.Template.Spec.Requirements = o.Requirements
	if o.Ready != "" {
		np.Status.Conditions = []status.Condition{{Type: status.ConditionReady, Status: o.Ready, Reason: "Testing", Message: "set by the test"}}
	}
	return np
}

// Requirement is the NodePool requirement key In values.
func Requirement(key string, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
	return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
}

// NodeClaim is a Karpenter NodeClaim with meta, launched for pool, with
// conditions conds.
func NodeClaim(meta metav1.ObjectMeta, pool string, conds ...status.Condition) *karpv1.NodeClaim {
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	meta.Labels[karpv1.NodePoolLabelKey] = pool
	return &karpv1.NodeClaim{ObjectMeta: meta, Status: karpv1.NodeClaimStatus{Conditions: conds}}
}

// Node is a node named name with labels.
func Node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}
