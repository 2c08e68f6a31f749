package fallback

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
)

// usage reads what counts against a NodePool's limits now (capacity.Usage).
// Read from the API when it can: Karpenter writes its FailedScheduling
// Events just before it creates the NodeClaims of the same round, so the
// cache may not have them yet.
func (c *Controller) usage(ctx context.Context, np *karpv1.NodePool) corev1.ResourceList {
	var reader client.Reader = c.kubeClient
	if c.opts.APIReader != nil {
		reader = c.opts.APIReader
	}
	var claims karpv1.NodeClaimList
	if err := reader.List(ctx, &claims, client.MatchingLabels{karpv1.NodePoolLabelKey: np.Name}); err != nil {
		return capacity.Usage(np, nil)
	}
	return capacity.Usage(np, claims.Items)
}

// limitsHold reports whether the NodePool's own state says it cannot launch
// another node for its limits (capacity.LimitsBacked, the rule placement
// also applies before it places a pod), with what counts against them now.
// It is the one question behind a limits mark for every workload and behind
// keeping the pool out at the outage's end.
func (c *Controller) limitsHold(ctx context.Context, np *karpv1.NodePool) (corev1.ResourceList, bool) {
	used := c.usage(ctx, np)
	return used, capacity.LimitsBacked(np, used, c.allowedTypes(ctx, np).Least)
}

// allowedTypes is what the cluster's state shows of the instance types the
// NodePool allows (capacity.AllowedTypes), from the cached NodeClaims.
func (c *Controller) allowedTypes(ctx context.Context, np *karpv1.NodePool) capacity.Allowance {
	var claims karpv1.NodeClaimList
	if err := c.kubeClient.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return capacity.AllowedTypes(np, nil)
	}
	return capacity.AllowedTypes(np, capacity.KnownTypes(claims.Items))
}

// noTypesHold reports whether the NodePool's own state says its
// requirements leave no instance type: Karpenter's NoCompatibleInstanceTypes
// is an Event, which whoever may create Events in its namespace can write
// too, so it marks the pool out for every workload, and keeps it out at
// the outage's end, only while this holds.
func (c *Controller) noTypesHold(ctx context.Context, np *karpv1.NodePool) bool {
	return c.allowedTypes(ctx, np).None
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
