package capacity

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// Usage is what counts against the NodePool's limits: its status, or the
// capacity of its NodeClaims (claims, of any pools: the pool's are picked
// by their karpenter.sh/nodepool label) when more, since Karpenter counts
// launching ones before its status shows them.
func Usage(np *karpv1.NodePool, claims []karpv1.NodeClaim) corev1.ResourceList {
	used := np.Status.Resources.DeepCopy()
	if used == nil {
		used = corev1.ResourceList{}
	}
	sum := corev1.ResourceList{}
	for i := range claims {
		nc := &claims[i]
		if nc.DeletionTimestamp != nil || nc.Labels[karpv1.NodePoolLabelKey] != np.Name {
			continue
		}
		capacity := nc.Status.Capacity
		if len(capacity) == 0 {
			capacity = nc.Spec.Resources.Requests
		}
		for name, q := range capacity {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
		total := sum["nodes"]
		total.Add(resource.MustParse("1"))
		sum["nodes"] = total
	}
	for name, q := range sum {
		if have, ok := used[name]; !ok || q.Cmp(have) > 0 {
			used[name] = q
		}
	}
	return used
}

// onEveryNode are resources every instance type has some of: a limit of
// theirs with nothing left leaves no instance type.
var onEveryNode = map[corev1.ResourceName]bool{"nodes": true, corev1.ResourceCPU: true, corev1.ResourceMemory: true}

// LimitsBacked reports whether some limit of the NodePool, given used,
// leaves less than least (what every instance type the pool allows has at
// the least, Allowance.Least; nil: nothing known) of its resource, nothing
// at all of a resource every node has, or less than nothing: the pool's
// own state says it cannot launch another node. It is the one rule behind
// a limits mark for every workload, behind keeping the pool out at the
// outage's end, and behind leaving a full pool out before placing (Full).
// Karpenter's limits finding (every instance type of the pool exceeds what
// is left) is written on a pod, where anyone who may create Events in the
// pod's namespace can write it too; it reaches other workloads only when
// this holds. The smallest node the pool has launched is no bound: a pool
// that launched only 16-cpu nodes and has 8 cpu left may still launch an
// 8-cpu one. A pod that needs more than a pool has left says nothing about
// the pods that fit in it.
func LimitsBacked(np *karpv1.NodePool, used, least corev1.ResourceList) bool {
	for name, limit := range np.Spec.Limits {
		left := limit.DeepCopy()
		if u, ok := used[name]; ok {
			left.Sub(u)
		}
		if left.Sign() < 0 || left.Sign() == 0 && onEveryNode[name] {
			return true
		}
		if bound, ok := least[name]; ok && left.Cmp(bound) < 0 {
			return true
		}
	}
	return false
}

// Headroom describes what is left of each of the NodePool's limits given
// used, and what the pod asks for of it: "cpu 100m of 3 left (the pod needs
// 900m)". requests may be nil (not known).
func Headroom(np *karpv1.NodePool, used, requests corev1.ResourceList) string {
	names := make([]string, 0, len(np.Spec.Limits))
	for name := range np.Spec.Limits {
		names = append(names, string(name))
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		name := corev1.ResourceName(n)
		limit := np.Spec.Limits[name]
		left := limit.DeepCopy()
		if u, ok := used[name]; ok {
			left.Sub(u)
		}
		if left.Sign() < 0 {
			left = resource.Quantity{}
		}
		part := fmt.Sprintf("%s %s of %s left", name, left.String(), limit.String())
		if need, ok := requests[name]; ok && !need.IsZero() {
			part += fmt.Sprintf(" (the pod needs %s)", need.String())
		} else if name == "nodes" {
			part += " (the pod needs a new node)"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}
