package test

import (
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// Signer signs a pod's decision; decision.Signer is one (this package
// cannot import decision, whose own tests use it).
type Signer interface {
	Sign(uid types.UID, group, nodePool string, fallback ...string) string
}

// PodOptions say what Pod builds.
type PodOptions struct {
	metav1.ObjectMeta
	// Owner, when set, controls the pod (its owner references).
	Owner *appsv1.ReplicaSet
	// Gates are scheduling gates other than apportion's, in order.
	Gates []string
	// Gated holds the pod with the placement gate (after Gates).
	Gated bool
	// NodeName binds the pod to a node.
	NodeName     string
	NodeSelector map[string]string
	// Requirements, when set, are the one term of the pod's required node
	// affinity.
	Requirements []corev1.NodeSelectorRequirement
	Phase        corev1.PodPhase
	Conditions   []corev1.PodCondition

	// Group, NodePool and Fallback, when set, are the pod's decision
	// annotations; Signer, when set, signs them.
	Group, NodePool string
	Fallback        []string
	Signer          Signer
}

// Pod is a pod as o says: metadata, owner, gates, node, phase and
// decision.
func Pod(o PodOptions) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: o.ObjectMeta,
		Spec:   corev1.PodSpec{NodeName: o.NodeName, NodeSelector: o.NodeSelector},
		Status: corev1.PodStatus{Phase: o.Phase, Conditions: o.Conditions}}
	if o.Owner != nil {
		p.OwnerReferences = OwnedBy("apps/v1", "ReplicaSet", o.Owner.Name, o.Owner.UID)
	}
	for _, g := range o.Gates {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
	}
	if o.Gated {
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: annotations.PlacementGate})
	}
	if o.Requirements != nil {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: o.Requirements}}}}}
	}
	decide(p, o)
	return p
}

// decide writes o's decision annotations onto p, signed when o has a
// Signer.
func decide(p *corev1.Pod, o PodOptions) {
	if o.Group == "" && o.NodePool == "" && o.Fallback == nil && o.Signer == nil {
		return
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	set := func(k, v string) {
		if v != "" {
			p.Annotations[k] = v
		}
	}
	set(annotations.Group, o.Group)
	set(annotations.NodePool, o.NodePool)
	// The separator is decision.FallbackSeparator's.
	set(annotations.Fallback, strings.Join(o.Fallback, ";"))
	if o.Signer != nil {
		p.Annotations[annotations.Signature] = o.Signer.Sign(p.UID, o.Group, o.NodePool, o.Fallback...)
	}
}

// Unschedulable is the condition the scheduler leaves on a pod it found no
// node for, since at.
func Unschedulable(at time.Time) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(at)}
}
