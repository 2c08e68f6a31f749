package test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
)

// PlacementPolicy is a PlacementPolicy with meta and spec.
func PlacementPolicy(meta metav1.ObjectMeta, spec v1alpha1.PlacementPolicySpec) *v1alpha1.PlacementPolicy {
	return &v1alpha1.PlacementPolicy{ObjectMeta: meta, Spec: spec}
}
