// Package annotations holds every annotation, label and scheduling-gate name
// apportion reads or writes, so that a key is spelled in exactly one place
// (annotations.go, with PatchPath for JSON patches), and Check, which tells
// the user what is wrong with the apportion.dev annotations on a workload:
// unknown keys, values out of range, keys only apportion writes
// (validate.go).
package annotations

import "strings"

const (
	// Prefix is the domain of every key apportion owns.
	Prefix = "apportion.dev/"

	// Strategy is the annotation users put on a workload (or its pod template)
	// to ask for a proportional split.
	Strategy = Prefix + "strategy"
	// LegacyStrategy is the annotation of the AWS sample webhook;
	// accepted unchanged so users can migrate without editing manifests.
	LegacyStrategy = "custom-pod-schedule-strategy"
	// LegacyCamelStrategy is the annotation of the original EKS blog webhook
	// (custom pod scheduling). It is honoured unless LegacyEnabled says otherwise.
	LegacyCamelStrategy = "CustomPodScheduleStrategy"
	// LegacyEnabled is that webhook's on/off switch that accompanies
	// LegacyCamelStrategy: when present and not "true", the strategy is ignored.
	LegacyEnabled = "UseCustomKubeScheduler"

	// Mode selects required (default) or preferred node affinity, or
	// shadow: decide and record, without changing the pod.
	Mode = Prefix + "mode"
	// Skip opts a pod or workload out when set to "true".
	Skip = Prefix + "skip"

	// Decision annotations written onto placed pods.
	Group         = Prefix + "group"
	NodePool      = Prefix + "nodepool"
	Architectures = Prefix + "architectures"
	Decision      = Prefix + "decision"
	// Signature proves that apportion wrote a pod's decision: an HMAC, with
	// a key only apportion holds, of the pod's UID, group and NodePool. A
	// decision annotation without it (written by a client) is not a
	// decision.
	Signature = Prefix + "signature"

	// Tolerate on a NodePool lets apportion send pods to it even though the
	// pods do not tolerate its taints (the tolerations are then added).
	Tolerate = Prefix + "tolerate"

	// PlacementGate is the scheduling gate held on a pod until its group is
	// decided.
	PlacementGate = Prefix + "placement"
	// CapacityTimeout on a workload or pod template overrides
	// --capacity-timeout: how long a decided pod may stay unschedulable,
	// with no NodeClaim on its way, before its group counts as out of
	// capacity (a Go duration).
	CapacityTimeout = Prefix + "capacity-timeout"
	// Fallback is written on a pod placed while some group of its strategy
	// was out of capacity; its value lists the groups that were out. Such
	// pods are the first a scale-down removes.
	Fallback = Prefix + "fallback"
	// Rebalance: "true" on a workload or its pod template lets apportion
	// (started with --rebalance) replace its fallback pods, one at a time
	// through the Eviction API, once a group they fell back from is back.
	Rebalance = Prefix + "rebalance"
	// OriginalResources is written on a pod whose resources a runtime-class
	// profile rewrote: JSON with the cpu and memory requests and limits
	// (and any replaced extended resource) removed, by container and init
	// container name.
	OriginalResources = Prefix + "original-resources"
	// Ignore, as a namespace label (any value), leaves the namespace alone:
	// the chart's webhook namespaceSelector skips it, and so does shadow
	// mode.
	Ignore = Prefix + "ignore"
	// NamespacePlacement, as a namespace label with the value
	// NamespacePlacementEnabled, sends every pod of the namespace to the pod
	// webhook when the chart scopes it (webhook.scope: namespaces). apportion
	// sets it on a namespace when a workload or PlacementPolicy in it opts
	// in, before admitting that object; users may set it too. Elsewhere
	// only pods that carry an apportion annotation reach the webhook.
	NamespacePlacement = Prefix + "placement"
	// Shadow is written, in shadow mode, on a pod apportion decided but did
	// not change: JSON of the group, NodePool, architectures and record it
	// would have written, signed like a decision (decision.Shadow).
	Shadow = Prefix + "shadow"
	// BeyondCaps ("true") is written, with a Signature and the decision
	// record, on a pod released without a group because every group with a
	// weight was at its cap (max=N): it counts in no group, whatever node it
	// runs on.
	BeyondCaps = Prefix + "beyond-caps"
)

// StrategyNames lists the annotation names a strategy may be written under,
// in the order they are looked up.
// DecisionKeys are the annotations only apportion writes, on the pods it
// decides. No client may: pods created with them lose them at admission,
// and a decision counts only with apportion's Signature.
var DecisionKeys = []string{Group, NodePool, Decision, Fallback, Signature, Shadow, BeyondCaps}

var StrategyNames = []string{Strategy, LegacyStrategy, LegacyCamelStrategy}

// Mode values.
const (
	ModeRequired  = "required"
	ModePreferred = "preferred"
	// ModeShadow decides pods without changing them: the decision is
	// recorded in the Shadow annotation only.
	ModeShadow = "shadow"
)

// Modes are the Mode values, the default first.
var Modes = []string{ModeRequired, ModePreferred, ModeShadow}

// ParseMode returns the mode v names (case and surrounding spaces aside),
// or "" and false when it names none.
func ParseMode(v string) (string, bool) {
	v = strings.ToLower(strings.TrimSpace(v))
	for _, m := range Modes {
		if v == m {
			return m, true
		}
	}
	return "", false
}

// FirstMode is the first of candidates that is a mode (ParseMode), in
// order of precedence; ModeRequired when none is.
func FirstMode(candidates ...string) string {
	for _, c := range candidates {
		if m, ok := ParseMode(c); ok {
			return m
		}
	}
	return ModeRequired
}

// NamespacePlacementEnabled is the value of the NamespacePlacement label.
const NamespacePlacementEnabled = "enabled"

// ArchitecturesAuto, as the value of Architectures on a namespace (label) or
// a workload or pod template (annotation), asks for architecture-only
// placement of pods that have no strategy: their images are inspected and
// they get the architecture affinity and the NodePool choice. On a placed
// pod the same key holds the architectures it may run on.
const ArchitecturesAuto = "auto"

// PatchPath is the JSON Patch path (a JSON Pointer, RFC 6901) of the
// annotation key in an object.
func PatchPath(key string) string {
	return "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}
