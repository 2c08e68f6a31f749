// Package decision writes a placement decision into a pod: the node affinity
// for the group's labels, the NodePool and the architectures, ANDed into every
// required term the user wrote (or as a preferred term in preferred mode),
// the tolerations an opted-in NodePool needs (in node-label mode, the
// tolerations and required node labels of the pod's architectures,
// archrules.go), the decision annotations (and
// the pod's deletion cost when the placement controller knows it), and the
// removal of the placement gate. Apply, Strip and RemoveGate are pure:
// they edit a pod object, and the caller sends the change. Every edit is one
// the API server allows on a pod held by a scheduling gate (additions to
// nodeSelectorTerms, tolerations and preferred terms; removal of a gate).
//
// Also here: Write, the one patch every decision, shadow decision and
// release is sent by, from a copy of the four fields they change, with the
// pod's metadata asked back (patch.go); Release, the gate's removal alone (the
// placement controller's and the gate janitor's), and APIError, how both
// report a failed write (release.go); MarkBeyondCaps, what a pod released
// beyond caps carries so that no count takes it for a stray (beyondcaps.go); the Signer that tells apportion's
// decisions from annotations a client wrote (signature.go); the deletion
// costs below the split's, shared by the placement and deletion-cost
// controllers (cost.go).
package decision

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// PodAnnotations are the decision annotations read back from a pod (Read,
// Decided, Signer.ReadShadow, ReleasedBeyondCaps): an informer cache of pods
// keeps these (the shadow one reduced by CompactShadow).
var PodAnnotations = []string{annotations.Group, annotations.NodePool, annotations.Fallback, annotations.Signature, annotations.Shadow, annotations.BeyondCaps}

// FallbackSeparator separates the group keys of the apportion.dev/fallback
// annotation.
const FallbackSeparator = ";"

// PreferredWeight is the weight of the preferred term written in preferred
// mode: the highest, so it outranks the user's own preferences.
const PreferredWeight = 100

// Decision is what the placement controller decided for one pod.
type Decision struct {
	// Group is the chosen strategy group.
	Group strategy.Group
	// NodePool is the pool serving the group; empty in node-label mode.
	NodePool string
	// Architectures the pod's images can run on; empty when unknown.
	Architectures []string
	// Tolerations the pod must gain for NodePool, or, in node-label mode,
	// for its architectures (ArchitectureRules).
	Tolerations []corev1.Toleration
	// NodeLabels the pod must require, in node-label mode, for its
	// architectures (ArchitectureRules): ANDed into every required term
	// that does not already hold them, like the architectures, also in
	// preferred mode.
	NodeLabels map[string]string
	// Preferred writes the group and the NodePool as a preferred term
	// instead of required ones; the architectures stay required.
	Preferred bool
	// Fallback lists the groups (keys) that were out of capacity when the
	// decision was made; written as the apportion.dev/fallback annotation.
	Fallback []string
	// ArchitectureOnly is a decision without a strategy: no group, only the
	// architectures and the NodePool. No group annotation is written.
	ArchitectureOnly bool
	// Record is written as the apportion.dev/decision annotation.
	Record Record
	// Signature (Signer.Sign) is written as apportion.dev/signature, so
	// that the decision is told apart from annotations a client wrote.
	Signature string
	// DeletionCost, when set, is written as the pod's
	// controller.kubernetes.io/pod-deletion-cost, in the same patch as
	// the decision: the cost the deletion-cost controller would give the
	// pod, known at decision time in the common case, spares it a second
	// write.
	DeletionCost *int
}

// Record is the small JSON kept on the pod to explain the decision.
type Record struct {
	// Strategy is a short hash of the canonical strategy the decision used.
	Strategy string `json:"strategy"`
	// Revision is the workload revision (pod-template-hash or
	// controller-revision-hash) the pod was counted in.
	Revision string `json:"revision,omitempty"`
	// Counts are the decided pods per group (strategy order) seen before
	// this one.
	Counts []int64 `json:"counts"`
	// Strays are the revision's running pods without a decision, per group
	// by their node's labels, that the decision counted too; omitted when
	// there are none.
	Strays []int64 `json:"strays,omitempty"`
	// Reason says how the group was chosen.
	Reason string `json:"reason"`
	// Out says, for a fallback, why each group left out was out of
	// capacity: "group: NodePool pool (reason)".
	Out []string `json:"out,omitempty"`
}

// StrategyHash is the short, stable identity of a strategy used in records.
func StrategyHash(s *strategy.Strategy) string {
	sum := sha256.Sum256([]byte(s.String()))
	return hex.EncodeToString(sum[:6])
}

// Requirements are the node selector requirements that express d.
// The group's labels, then the architectures, then the NodePool.
func (d Decision) Requirements() []corev1.NodeSelectorRequirement {
	return d.requirements(true)
}

// placement is the group's labels and the NodePool: what preferred mode
// turns into a preference.
func (d Decision) placement() []corev1.NodeSelectorRequirement {
	return d.requirements(false)
}

func (d Decision) requirements(withArch bool) []corev1.NodeSelectorRequirement {
	reqs := make([]corev1.NodeSelectorRequirement, 0, len(d.Group.Labels)+2)
	if !d.ArchitectureOnly {
		for _, l := range d.Group.Labels {
			reqs = append(reqs, corev1.NodeSelectorRequirement{Key: l.Key, Operator: corev1.NodeSelectorOpIn, Values: []string{l.Value}})
		}
	}
	if withArch {
		reqs = append(reqs, d.architecture()...)
	}
	if d.NodePool != "" {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{d.NodePool}})
	}
	return reqs
}

// architecture is the images' architectures: always required, since a pod
// on another architecture cannot start.
func (d Decision) architecture() []corev1.NodeSelectorRequirement {
	if len(d.Architectures) == 0 {
		return nil
	}
	return []corev1.NodeSelectorRequirement{{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: slices.Clone(d.Architectures)}}
}

// Apply writes d into pod and removes the placement gate. pod is modified in
// place; callers pass a copy of the cached object.
func Apply(pod *corev1.Pod, d Decision) {
	required := d.architecture()
	if d.Preferred {
		if reqs := d.placement(); len(reqs) > 0 {
			na := nodeAffinity(pod)
			na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution,
				corev1.PreferredSchedulingTerm{Weight: PreferredWeight, Preference: corev1.NodeSelectorTerm{MatchExpressions: reqs}})
		}
	} else {
		required = d.Requirements()
	}
	labels := d.missingLabels(pod)
	if len(required) > 0 || len(labels) > 0 {
		na := nodeAffinity(pod)
		if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
			na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
		}
		// Terms are ORed: adding the decision to every term keeps the
		// user's alternatives and makes each of them honour the decision.
		terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		for i := range terms {
			terms[i].MatchExpressions = append(terms[i].MatchExpressions, slices.Clone(required)...)
			for _, l := range labels {
				if !slices.ContainsFunc(terms[i].MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return sameRequirement(r, l) }) {
					terms[i].MatchExpressions = append(terms[i].MatchExpressions, l)
				}
			}
		}
	}
	for _, t := range d.Tolerations {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(have corev1.Toleration) bool { return sameOperator(have).MatchToleration(sameOperator(t)) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
		}
	}
	// A decision annotation the pod already carries (written by a client,
	// or by an earlier decision) must not survive into this one: a
	// client-written fallback next to a signed group would read as part of
	// apportion's decision.
	Strip(pod)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	if !d.ArchitectureOnly {
		pod.Annotations[annotations.Group] = d.Group.Key()
	}
	if d.NodePool != "" {
		pod.Annotations[annotations.NodePool] = d.NodePool
	}
	if len(d.Architectures) > 0 {
		pod.Annotations[annotations.Architectures] = strings.Join(d.Architectures, ",")
	}
	if len(d.Fallback) > 0 {
		pod.Annotations[annotations.Fallback] = strings.Join(d.Fallback, FallbackSeparator)
	}
	if d.Signature != "" {
		pod.Annotations[annotations.Signature] = d.Signature
	}
	if d.DeletionCost != nil {
		pod.Annotations[corev1.PodDeletionCost] = strconv.Itoa(*d.DeletionCost)
	}
	rec, _ := json.Marshal(d.Record) // a struct of strings and ints cannot fail to marshal
	pod.Annotations[annotations.Decision] = string(rec)
	RemoveGate(pod)
}

// Strip removes the annotations only apportion writes on a decided pod: the
// group, the NodePool, the fallback, the signature, the decision record and
// the shadow and beyond-caps marks (annotations.DecisionKeys).
// The architectures annotation stays: on a pod it may be the user's
// apportion.dev/architectures: auto opt-in, which a decision overwrites.
func Strip(pod *corev1.Pod) {
	for _, k := range annotations.DecisionKeys {
		delete(pod.Annotations, k)
	}
}

// missingLabels are d's NodeLabels as requirements (key In [value]), in key
// order, but for those the pod's nodeSelector already holds.
func (d Decision) missingLabels(pod *corev1.Pod) []corev1.NodeSelectorRequirement {
	var out []corev1.NodeSelectorRequirement
	for _, k := range slices.Sorted(maps.Keys(d.NodeLabels)) {
		if v, ok := pod.Spec.NodeSelector[k]; ok && v == d.NodeLabels[k] {
			continue
		}
		out = append(out, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{d.NodeLabels[k]}})
	}
	return out
}

// sameRequirement: have already requires what want does (the same key,
// operator and values, in any order).
func sameRequirement(have, want corev1.NodeSelectorRequirement) bool {
	if have.Key != want.Key || have.Operator != want.Operator || len(have.Values) != len(want.Values) {
		return false
	}
	return slices.Equal(slices.Sorted(slices.Values(have.Values)), slices.Sorted(slices.Values(want.Values)))
}

// sameOperator is t with the default operator spelt out (Equal), so that
// a toleration written without one matches the same one written with it.
func sameOperator(t corev1.Toleration) *corev1.Toleration {
	if t.Operator == "" {
		t.Operator = corev1.TolerationOpEqual
	}
	return &t
}

func nodeAffinity(pod *corev1.Pod) *corev1.NodeAffinity {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	return pod.Spec.Affinity.NodeAffinity
}

// RemoveGate drops the placement gate, leaving any other gates.
func RemoveGate(pod *corev1.Pod) {
	pod.Spec.SchedulingGates = slices.DeleteFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == annotations.PlacementGate
	})
	if len(pod.Spec.SchedulingGates) == 0 {
		pod.Spec.SchedulingGates = nil
	}
}

// HasGate reports whether the pod is held by the placement gate.
func HasGate(pod *corev1.Pod) bool {
	return GatedBy(pod.Spec.SchedulingGates)
}

// GatedBy reports whether gates hold apportion's placement gate.
func GatedBy(gates []corev1.PodSchedulingGate) bool {
	return slices.ContainsFunc(gates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == annotations.PlacementGate
	})
}

// Decided reports whether the pod carries a group annotation. Anyone who can
// write the pod can write one: Signer.Read tells whether apportion did, and
// only such a decision is to be acted on or counted.
func Decided(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[annotations.Group]
	return ok
}
