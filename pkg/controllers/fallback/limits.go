package fallback

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// usage reads what counts against a NodePool's limits now: its status, or
// the capacity of its NodeClaims when more (Karpenter counts launching ones
// before its status shows them). Read from the API when it can: Karpenter
// writes its FailedScheduling Events just before it creates the NodeClaims
// of the same round, so the cache may not have them yet.
func (c *Controller) usage(ctx context.Context, np *karpv1.NodePool) corev1.ResourceList {
	used := np.Status.Resources.DeepCopy()
	if used == nil {
		used = corev1.ResourceList{}
	}
	var reader client.Reader = c.kubeClient
	if c.opts.APIReader != nil {
		reader = c.opts.APIReader
	}
	var claims karpv1.NodeClaimList
	if err := reader.List(ctx, &claims, client.MatchingLabels{karpv1.NodePoolLabelKey: np.Name}); err != nil {
		return used
	}
	sum := corev1.ResourceList{}
	for i := range claims.Items {
		nc := &claims.Items[i]
		if nc.DeletionTimestamp != nil {
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

// limitsHold reports whether the NodePool's own state says it cannot launch
// another node for its limits (limitsBacked), with what counts against
// them now. It is the one question behind a limits mark for every workload
// and behind keeping the pool out at the outage's end.
func (c *Controller) limitsHold(ctx context.Context, np *karpv1.NodePool) (corev1.ResourceList, bool) {
	used := c.usage(ctx, np)
	return used, limitsBacked(np, used, c.allowedTypes(ctx, np).least)
}

// limitsBacked reports whether some limit of the NodePool, given used,
// leaves less than least (what every instance type the pool allows has at
// the least, see allowance; nil: nothing known) of its resource, nothing at
// all of a resource every node has, or less than nothing. Karpenter's limits
// finding (every instance type of the pool exceeds what is left) is written
// on a pod, where anyone who may create Events in the pod's namespace can
// write it too; it reaches other workloads only when this holds. The
// smallest node the pool has launched is no bound: a pool that launched
// only 16-cpu nodes and has 8 cpu left may still launch an 8-cpu one. A pod
// that needs more than a pool has left says nothing about the pods that
// fit in it.
func limitsBacked(np *karpv1.NodePool, used, least corev1.ResourceList) bool {
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

// headroom describes what is left of each of the NodePool's limits given
// used, and what the pod asks for of it: "cpu 100m of 3 left (the pod needs
// 900m)". requests may be nil (not known).
func headroom(np *karpv1.NodePool, used, requests corev1.ResourceList) string {
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

// podRequests is what the pod asks of a node: the sum of its containers'
// requests, or its largest init container's if larger, plus its overhead.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, ctr := range pod.Spec.Containers {
		for name, q := range ctr.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	for _, ctr := range pod.Spec.InitContainers {
		for name, q := range ctr.Resources.Requests {
			if have := out[name]; q.Cmp(have) > 0 {
				out[name] = q.DeepCopy()
			}
		}
	}
	for name, q := range pod.Spec.Overhead {
		sum := out[name]
		sum.Add(q)
		out[name] = sum
	}
	return out
}

// limitsOf is a copy of a NodePool's limits and usage, kept with an outage
// so that its end can be checked against them.
type limitsOf struct {
	limits, used corev1.ResourceList
}

func snapshotLimits(np *karpv1.NodePool) limitsOf {
	return limitsOf{limits: corev1.ResourceList(np.Spec.Limits).DeepCopy(), used: np.Status.Resources.DeepCopy()}
}

// grown reports whether some limited resource has more room now than in
// the snapshot: its limit raised or removed, or its usage lower.
func (l limitsOf) grown(np *karpv1.NodePool) bool {
	for name, was := range l.limits {
		now, ok := np.Spec.Limits[name]
		if !ok || now.Cmp(was) > 0 {
			return true
		}
		if used, had := l.used[name]; had {
			if cur := np.Status.Resources[name]; cur.Cmp(used) < 0 {
				return true
			}
		}
	}
	return false
}
