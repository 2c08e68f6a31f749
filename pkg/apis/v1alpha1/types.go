package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mode says how a decision binds a pod, as the apportion.dev/mode annotation
// does.
// +kubebuilder:validation:Enum=required;preferred;shadow
type Mode string

const (
	// ModeRequired writes required node affinity (the default).
	ModeRequired Mode = "required"
	// ModePreferred writes preferred terms that Karpenter relaxes when it
	// cannot satisfy them.
	ModePreferred Mode = "preferred"
	// ModeShadow decides the pods without changing them: what apportion
	// would have done is recorded in the apportion.dev/shadow annotation.
	ModeShadow Mode = "shadow"
)

// PlacementPolicySpec is the strategy and the workloads it applies to.
//
// +kubebuilder:validation:XValidation:rule="has(self.strategy) != has(self.distribution)",message="exactly one of strategy and distribution must be set"
type PlacementPolicySpec struct {
	// Target names the workloads of the policy's namespace the strategy
	// applies to: one workload by reference, or every workload a label
	// selector matches.
	// +required
	Target Target `json:"target"`

	// Strategy is the split: structured groups, or the string syntax of the
	// apportion.dev/strategy annotation.
	// +optional
	Strategy *Strategy `json:"strategy,omitempty"`

	// Distribution is the form of Versprei's PodDistributor, accepted as
	// is: one group per entry, its nodeLabel the group's labels and its
	// weight the group's weight (percentages are just weights).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.exists(d, d.weight > 0)",message="every entry has weight 0: at least one entry needs a positive weight"
	Distribution []DistributionEntry `json:"distribution,omitempty"`

	// Mode is required (hard node affinity), preferred, or shadow (decide
	// and record without changing the pods). Unset, the installation's
	// default mode applies (the chart's settings.defaultMode, required
	// unless changed).
	// +optional
	Mode Mode `json:"mode,omitempty"`
}

// Target is a workload reference (apiVersion, kind, name, as Versprei's),
// or a label selector over the workloads of the namespace.
//
// +kubebuilder:validation:XValidation:rule="has(self.name) != has(self.selector)",message="exactly one of name and selector must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.name) || has(self.kind)",message="kind is required with name"
// +kubebuilder:validation:XValidation:rule="!has(self.apiVersion) || (has(self.kind) && (self.kind in ['Rollout', 'Workflow'] ? self.apiVersion.startsWith('argoproj.io/') : self.kind in ['Job', 'CronJob'] ? self.apiVersion == 'batch/v1' : self.apiVersion == 'apps/v1'))",message="apiVersion must be apps/v1 for Deployment, StatefulSet and ReplicaSet, batch/v1 for Job and CronJob, argoproj.io/... for Rollout and Workflow"
type Target struct {
	// APIVersion of the workload: apps/v1, batch/v1 for a Job or CronJob,
	// or argoproj.io/v1alpha1 for a Rollout or Workflow. Optional: the kind
	// says it.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the workload. Required with name; with a selector, only
	// workloads of this kind match (every kind when empty). A policy
	// targeting a CronJob applies to each of its Jobs.
	// +optional
	// +kubebuilder:validation:Enum=Deployment;StatefulSet;ReplicaSet;Rollout;Job;CronJob;Workflow
	Kind string `json:"kind,omitempty"`

	// Name of the workload, in the policy's namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// Selector matches the labels of workloads (the workload's own labels,
	// not its pods').
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// Strategy is the split in one of two forms.
//
// +kubebuilder:validation:XValidation:rule="has(self.groups) != has(self.text)",message="exactly one of groups and text must be set"
type Strategy struct {
	// Groups are filled base first, in this order; the remaining replicas
	// are shared in proportion to the weights.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.exists(g, has(g.weight) && g.weight > 0)",message="every group has weight 0: at least one group needs a positive weight"
	Groups []Group `json:"groups,omitempty"`

	// Text is the strategy in the annotation's string syntax, e.g.
	// karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Text string `json:"text,omitempty"`
}

// Group is one share of the split: its pods land on nodes carrying all of
// Labels.
type Group struct {
	// Labels are the node labels the group requires. A key without a "/"
	// may not be base, weight, max or min in any case, nor one typo away
	// from base or weight: set the fields instead.
	// +required
	// +kubebuilder:validation:MinProperties=1
	Labels map[string]string `json:"labels"`

	// Base is the number of pods the group gets first.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Base int32 `json:"base,omitempty"`

	// Weight is the group's share of the pods past the bases.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Weight int32 `json:"weight,omitempty"`

	// Max is the most pods of a revision the group holds, at least its
	// base; what it cannot take is shared by the other groups. Unset: no cap
	// (0 is refused: a group that may hold no pod is no group).
	// +optional
	// +kubebuilder:validation:Minimum=1
	Max *int32 `json:"max,omitempty"`
}

// DistributionEntry is one entry of a Versprei PodDistributor's distribution.
type DistributionEntry struct {
	// NodeLabel are the node labels of the group.
	// +required
	// +kubebuilder:validation:MinProperties=1
	NodeLabel map[string]string `json:"nodeLabel"`

	// Weight is the group's weight.
	// +required
	// +kubebuilder:validation:Minimum=0
	Weight int32 `json:"weight"`
}

// Condition types of a PlacementPolicy.
const (
	// ConditionReady is True when the policy places the pods of at least
	// one workload.
	ConditionReady = "Ready"
	// ConditionGroupUnavailable is True when some group has no NodePool (or,
	// without Karpenter, no node) to serve it: it is left out of the split.
	ConditionGroupUnavailable = "GroupUnavailable"
	// ConditionConflict is True when a targeted workload follows something
	// else: its own annotation, or an older policy.
	ConditionConflict = "Conflict"
)

// Condition reasons.
const (
	ReasonApplied          = "Applied"
	ReasonInvalidStrategy  = "InvalidStrategy"
	ReasonTargetNotFound   = "TargetNotFound"
	ReasonNoGroupAvailable = "NoGroupAvailable"
	ReasonConflict         = "Conflict"
	ReasonGroupsAvailable  = "GroupsAvailable"
	ReasonNoNodePool       = "NoNodePool"
	ReasonNoConflict       = "NoConflict"
	ReasonOlderPolicyWins  = "OlderPolicyWins"
	ReasonAnnotationWins   = "AnnotationWins"
)

// PlacementPolicyStatus is what the policy does now.
type PlacementPolicyStatus struct {
	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Strategy is the policy's strategy in canonical string syntax.
	// +optional
	Strategy string `json:"strategy,omitempty"`

	// Target describes the workloads the policy places, e.g.
	// "Deployment/web" or "2 workloads".
	// +optional
	Target string `json:"target,omitempty"`

	// Replicas is the sum of the desired replicas of the workloads the
	// policy places.
	// +optional
	Replicas int32 `json:"replicas"`

	// WithinQuota is true when, for every workload the policy places, the
	// Running pods are split within floor/ceil of each group's ideal share
	// at their number, and none runs on a node no group matches.
	// +optional
	WithinQuota bool `json:"withinQuota"`

	// Groups are the groups in strategy order.
	// +optional
	// +listType=atomic
	Groups []GroupStatus `json:"groups,omitempty"`

	// Workloads are the targeted workloads, each with what places it.
	// +optional
	// +listType=atomic
	Workloads []WorkloadStatus `json:"workloads,omitempty"`

	// Unmatched counts the Running pods of the placed workloads on nodes
	// that no group's labels match.
	// +optional
	Unmatched int32 `json:"unmatched,omitempty"`

	// BeyondCaps counts the pods of the placed workloads past every
	// group's cap at their replica counts: placed without a group.
	// +optional
	BeyondCaps int32 `json:"beyondCaps,omitempty"`

	// Conditions: Ready, GroupUnavailable, Conflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GroupStatus is one group's part.
type GroupStatus struct {
	// Key is the group's labels as key=value joined by ',' (the
	// apportion.dev/group annotation of its pods).
	Key string `json:"key"`
	// NodePool serves the group ("" without Karpenter or when none does).
	// +optional
	NodePool string `json:"nodePool,omitempty"`
	// Unavailable says why no NodePool serves the group.
	// +optional
	Unavailable string `json:"unavailable,omitempty"`
	// Desired is the quota method's count for the group at the current
	// replica count, summed over the placed workloads.
	Desired int32 `json:"desired"`
	// Actual is the number of Running pods on nodes carrying the group's
	// labels, summed over the placed workloads.
	Actual int32 `json:"actual"`
}

// WorkloadStatus is one targeted workload.
type WorkloadStatus struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Replicas is the workload's spec.replicas.
	Replicas int32 `json:"replicas"`
	// PlacedBy is what places the workload's pods: this policy
	// ("PlacementPolicy"), its own annotation ("Annotation"), or an older
	// policy ("PlacementPolicy other-name").
	PlacedBy string `json:"placedBy"`
	// WithinQuota is set for workloads this policy places.
	// +optional
	WithinQuota *bool `json:"withinQuota,omitempty"`
}

// PlacementPolicy sets the placement strategy of workloads without touching
// them. An apportion.dev/strategy annotation on a workload wins over a
// policy; of two policies targeting one workload, the oldest wins. A policy
// created or changed applies to pods created from then on: running pods are
// not moved.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ppol,categories=apportion
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.status.target`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Within quota",type=boolean,JSONPath=`.status.withinQuota`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.status.strategy`,priority=1
type PlacementPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PlacementPolicySpec   `json:"spec"`
	Status PlacementPolicyStatus `json:"status,omitempty"`
}

// PlacementPolicyList is a list of PlacementPolicies.
//
// +kubebuilder:object:root=true
type PlacementPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PlacementPolicy `json:"items"`
}
