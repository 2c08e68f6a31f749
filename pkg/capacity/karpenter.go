package capacity

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NodePoolGVK is Karpenter's NodePool. Without its API (the cluster runs no
// Karpenter), groups are matched to the nodes' labels instead.
var NodePoolGVK = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodePool"}

// What Karpenter's provisioner says about pods and NodePools, as Kubernetes
// Events (sigs.k8s.io/karpenter pkg/controllers/provisioning/scheduling,
// events.go): the source component, and the reasons read here.
const (
	KarpenterComponent = "karpenter"
	// EventFailedScheduling on a pod: Karpenter found no existing node,
	// in-flight NodeClaim or new NodeClaim for it. The message joins one
	// error per NodePool with "; ".
	EventFailedScheduling = "FailedScheduling"
	// EventNominated on a pod: Karpenter expects it to run on a NodeClaim
	// or node ("Pod should schedule on: nodeclaim/..."). Karpenter
	// rate-limits these across pods, so a pod may be nominated without one.
	EventNominated = "Nominated"
	// EventNoCompatibleInstanceTypes on a NodePool: its requirements leave
	// no instance type, so Karpenter builds no NodeClaim from it at all.
	EventNoCompatibleInstanceTypes = "NoCompatibleInstanceTypes"
)

// Finding is what a FailedScheduling message says about one NodePool.
type Finding int

const (
	// FindingNone: nothing about the NodePool (the message is about other
	// pools, or says nothing that apportion acts on).
	FindingNone Finding = iota
	// FindingLimits: every instance type of the NodePool would exceed
	// what is left of its limits (or its node limit is used up). Karpenter
	// computes this from the pool's limits and usage before it looks at
	// the pod, so, when Karpenter wrote it, it holds for every pod: the
	// pool cannot launch a node. Anyone who may create Events in the pod's
	// namespace can write it too: the detector checks the pool's state.
	FindingLimits
	// FindingDoesNotFit: no instance type of the NodePool has enough
	// resources for the pod, or meets its requirements: the pod's own
	// requests or constraints, not the pool's capacity.
	FindingDoesNotFit
	// FindingNoOffering: instance types fit the pod, but none has an
	// offering available for it now (capacity type and zone the pod
	// allows), as when a cloud reports insufficient capacity.
	FindingNoOffering
)

// Verdict is a FailedScheduling message read for one NodePool.
type Verdict struct {
	Finding Finding
	// Detail is Karpenter's own words about the NodePool.
	Detail string
}

const (
	failedPrefix = "Failed to schedule pod, "
	limitsText   = "all available instance types exceed limits for nodepool"
	nodesText    = "node limits have been exhausted for nodepool"
	noTypeText   = "no instance type"
)

// offeringOnly are the InstanceTypeFilterError texts (the part before
// ", requirements=") that say the pod's requirements and resources are met by
// some instance type and only the offerings are missing; every other "no
// instance type ..." text says the pod itself does not fit.
var offeringOnly = map[string]struct{}{
	"no instance type has the required offering":                                                               {},
	"no instance type which met the scheduling requirements and had enough resources, had a required offering": {},
}

// ReadFailedScheduling reads what Karpenter's FailedScheduling message says
// about pool, the NodePool apportion pinned the pod to.
//
// A pod apportion placed requires karpenter.sh/nodepool In [pool], so every
// other NodePool fails it on that requirement (or on a taint) before its
// instance types are looked at: a message's "no instance type ..." part can
// only be about pool. The limits parts name their NodePool:
//
//	Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool,
//	karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [on-demand];
//	all available instance types exceed limits for nodepool (NodePool=spot)
//
// reads FindingLimits for spot and FindingNone for on-demand.
func ReadFailedScheduling(message, pool string) Verdict {
	rest, ok := strings.CutPrefix(message, failedPrefix)
	if !ok || pool == "" {
		return Verdict{}
	}
	named := "(NodePool=" + pool + ")"
	var v Verdict
	for _, part := range segments(rest) {
		switch {
		case strings.Contains(part, limitsText) || strings.Contains(part, nodesText):
			if strings.Contains(part, named) {
				return Verdict{Finding: FindingLimits, Detail: part}
			}
		case strings.HasPrefix(part, noTypeText):
			head, _, _ := strings.Cut(part, ", requirements=")
			if _, only := offeringOnly[head]; only {
				v = Verdict{Finding: FindingNoOffering, Detail: part}
			} else {
				v = Verdict{Finding: FindingDoesNotFit, Detail: part}
			}
		}
	}
	return v
}

// CompactFailedScheduling keeps of a FailedScheduling message only the parts
// ReadFailedScheduling reads (limits, and "no instance type ..."), so that a
// message bounded for the cache still holds the part about the pod's own
// NodePool. On a cluster of many NodePools, Karpenter's message lists a
// requirements mismatch for each of the others first (by weight), and a
// plain cut would drop the part that matters. Other messages are returned
// unchanged.
func CompactFailedScheduling(message string) string {
	rest, ok := strings.CutPrefix(message, failedPrefix)
	if !ok {
		return message
	}
	var kept []string
	for _, part := range segments(rest) {
		if strings.Contains(part, limitsText) || strings.Contains(part, nodesText) || strings.HasPrefix(part, noTypeText) {
			kept = append(kept, part)
		}
	}
	return failedPrefix + strings.Join(kept, "; ")
}

// segments splits a FailedScheduling message into its NodePools' parts.
// Karpenter joins them with "; ", and a requirements error joins its keys
// the same way ("key a, ...; key b, ..."): those continue the part before.
func segments(msg string) []string {
	var out []string
	for _, s := range strings.Split(msg, "; ") {
		if len(out) > 0 && strings.HasPrefix(s, "key ") {
			out[len(out)-1] += "; " + s
			continue
		}
		out = append(out, s)
	}
	return out
}
