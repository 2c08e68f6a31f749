// Package v1alpha1 holds the apportion.dev/v1alpha1 API: PlacementPolicy, a
// strategy kept in its own resource that names the workloads it applies to,
// for platform teams that set placement for workloads they do not own (as
// Versprei's PodDistributor), and ClusterPlacementPolicy, the same over the
// namespaces a selector matches. The CRD in chart/crds is generated from these types
// (`make generate`). The package imports only apimachinery, so that clients
// can use it cheaply.
//
// +kubebuilder:object:generate=true
// +groupName=apportion.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is apportion.dev/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "apportion.dev", Version: "v1alpha1"}

	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the PlacementPolicy and ClusterPlacementPolicy kinds
	// and their lists to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

// PlacementPolicyGVK is the PlacementPolicy kind.
var PlacementPolicyGVK = GroupVersion.WithKind("PlacementPolicy")

// ClusterPlacementPolicyGVK is the ClusterPlacementPolicy kind.
var ClusterPlacementPolicyGVK = GroupVersion.WithKind("ClusterPlacementPolicy")

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PlacementPolicy{}, &PlacementPolicyList{}, &ClusterPlacementPolicy{}, &ClusterPlacementPolicyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
