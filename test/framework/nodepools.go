package framework

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// WaitNodePoolsReady waits until every NodePool is Ready (validated, its
// node class resolved), or ctx ends. Karpenter provisions only from Ready
// NodePools: a pod created before then stays Pending until Karpenter's next
// look, seconds later, which a test would otherwise count as the pod's time.
func WaitNodePoolsReady(ctx context.Context, kube client.Client) error {
	for {
		err := nodePoolsReady(ctx, kube)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the NodePools to be Ready: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func nodePoolsReady(ctx context.Context, kube client.Client) error {
	var pools karpv1.NodePoolList
	if err := kube.List(ctx, &pools); err != nil {
		return fmt.Errorf("listing NodePools: %w", err)
	}
	for _, np := range pools.Items {
		if !np.StatusConditions().Root().IsTrue() {
			return fmt.Errorf("NodePool %s is not Ready: %v", np.Name, np.Status.Conditions)
		}
	}
	return nil
}
