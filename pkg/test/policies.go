package test

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
)

// PlacementPolicy is a PlacementPolicy with meta and spec.
func PlacementPolicy(meta metav1.ObjectMeta, spec v1alpha1.PlacementPolicySpec) *v1alpha1.PlacementPolicy {
	return &v1alpha1.PlacementPolicy{ObjectMeta: meta, Spec: spec}
}

// Condition is the condition of type typ among conds, the zero one when
// there is none.
func Condition(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}
