// Package v1alpha1 holds the apportion.dev/v1alpha1 API: PlacementPolicy, a
// strategy kept in its own resource that names the workloads it applies to,
// for platform teams that set placement for workloads they do not own (seed
// 001's PodDistributor). The CRD in chart/crds is generated from these types
// (`make generate`).
//
// +kubebuilder:object:generate=true
// +groupName=apportion.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is apportion.dev/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "apportion.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this group version.
	SchemeBuilder = (&scheme.Builder{GroupVersion: GroupVersion}).Register(&PlacementPolicy{}, &PlacementPolicyList{})

	// AddToScheme adds PlacementPolicy and PlacementPolicyList to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// PlacementPolicyGVK is the PlacementPolicy kind.
var PlacementPolicyGVK = GroupVersion.WithKind("PlacementPolicy")
