package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterPlacementPolicySpec is a strategy for the workloads of every
// namespace its selector matches.
type ClusterPlacementPolicySpec struct {
	// NamespaceSelector matches the labels of the namespaces the policy
	// covers; empty, every namespace. Excluded namespaces, apportion's own,
	// kube-system, kube-public, kube-node-lease and namespaces labelled
	// apportion.dev/ignore are never covered.
	// +required
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`

	// Target names the workloads of those namespaces the strategy applies
	// to: their kinds and a selector over their labels.
	// +optional
	Target ClusterTarget `json:"target,omitempty"`

	// Strategy is the split: structured groups, or the string syntax of the
	// apportion.dev/strategy annotation.
	// +required
	Strategy Strategy `json:"strategy"`

	// Mode is required (hard node affinity), preferred, or shadow (decide
	// and record without changing the pods). Unset, the installation's
	// default mode applies.
	// +optional
	Mode Mode `json:"mode,omitempty"`

	// Priority ranks the cluster policies that cover one workload: the
	// highest wins. Of equal priorities the oldest wins (then the first by
	// name), and both policies report the tie.
	// +optional
	// +kubebuilder:default=0
	Priority int32 `json:"priority"`

	// AllowSkip says whether a workload owner may opt out with
	// apportion.dev/skip: "true" on the workload or its pod template. When
	// false, the annotation is ignored for the workloads this policy
	// places.
	// +optional
	// +kubebuilder:default=true
	AllowSkip *bool `json:"allowSkip,omitempty"`
}

// ClusterTarget selects workloads by kind and labels.
type ClusterTarget struct {
	// Kinds of the workloads covered; every kind when empty.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:Enum=Deployment;StatefulSet;ReplicaSet;Rollout;Job;CronJob;Workflow
	Kinds []string `json:"kinds,omitempty"`

	// Selector matches the labels of workloads (the workload's own labels,
	// not its pods'); unset or empty, every workload of those kinds.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// Condition reasons of a ClusterPlacementPolicy.
const (
	// ReasonNoWorkload: no workload is covered (Ready False).
	ReasonNoWorkload = "NoWorkload"
	// ReasonPriorityTie: another cluster policy of the same priority
	// covers some of the same workloads (Conflict True).
	ReasonPriorityTie = "PriorityTie"
)

// ClusterPlacementPolicyStatus is what the policy does now.
type ClusterPlacementPolicyStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Strategy is the policy's strategy in canonical string syntax.
	// +optional
	Strategy string `json:"strategy,omitempty"`

	// Matched is the number of workloads the policy covers (namespace and
	// target match), whatever places them.
	// +optional
	Matched int32 `json:"matched"`

	// Placed is the number of those the policy places: the others carry
	// their own strategy, are targeted by a PlacementPolicy of their
	// namespace, are covered by a higher-ranked cluster policy, or opted
	// out.
	// +optional
	Placed int32 `json:"placed"`

	// WithinQuota is the number of the workloads it places whose Running
	// pods, counted by the labels of their nodes, are within quota of the
	// strategy at their Running count (pods beyond every cap run anywhere).
	// +optional
	WithinQuota int32 `json:"withinQuota"`

	// OffStrategy lists, up to 10 and sorted, the workloads it places that
	// are not within quota, as "namespace/kind/name: reason".
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	OffStrategy []string `json:"offStrategy,omitempty"`

	// Namespaces is the number of namespaces the selector covers.
	// +optional
	Namespaces int32 `json:"namespaces"`

	// Conflicts names, up to 10, the cluster policies of the same priority
	// that cover some of the same workloads.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Conflicts []string `json:"conflicts,omitempty"`

	// Conditions: Ready, Conflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterPlacementPolicy sets the placement strategy of the workloads of
// many namespaces at once, for platform teams. A workload's own
// apportion.dev/strategy annotation wins over any policy, and a
// PlacementPolicy of its namespace wins over a cluster policy; of the
// cluster policies covering a workload, the highest priority wins. A policy
// created or changed applies to pods created from then on: running pods are
// not moved.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cpol,categories=apportion
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Matched",type=integer,JSONPath=`.status.matched`
// +kubebuilder:printcolumn:name="Placed",type=integer,JSONPath=`.status.placed`
// +kubebuilder:printcolumn:name="WithinQuota",type=integer,JSONPath=`.status.withinQuota`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Conflict",type=string,JSONPath=`.status.conditions[?(@.type=="Conflict")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.status.strategy`,priority=1
type ClusterPlacementPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterPlacementPolicySpec   `json:"spec"`
	Status ClusterPlacementPolicyStatus `json:"status,omitempty"`
}

// SkipAllowed reports whether apportion.dev/skip opts a workload out of
// the policy (the default).
func (p *ClusterPlacementPolicy) SkipAllowed() bool {
	return p.Spec.AllowSkip == nil || *p.Spec.AllowSkip
}

// ClusterPlacementPolicyList is a list of ClusterPlacementPolicies.
//
// +kubebuilder:object:root=true
type ClusterPlacementPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterPlacementPolicy `json:"items"`
}
