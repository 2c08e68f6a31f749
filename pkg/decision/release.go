package decision

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/metrics"
)

// The writes on the placement path (values of
// apportion_placement_api_errors_total's operation label).
const (
	OperationDecide  = "decide"  // the patch that writes a decision
	OperationRelease = "release" // the patch that removes the gate alone
)

// Release removes the placement gate from pod with an optimistic lock, so it
// never races a concurrent decision: the placement controller and the gate
// janitor both release through it, and a conflict tells either one that the
// other got there first. edits change the pod's copy in the same patch (the
// placement controller's MarkBeyondCaps).
func Release(ctx context.Context, kubeClient client.Client, pod *corev1.Pod, edits ...func(*corev1.Pod)) error {
	if err := Write(ctx, kubeClient, pod, true, append(edits, RemoveGate)...); err != nil {
		return fmt.Errorf("removing the placement gate: %w", err)
	}
	return nil
}

// APIError is what a reconciler returns after a failed write of operation
// (other than a conflict or not-found, which callers handle): the error,
// counted, so that the workqueue retries the pod with its per-item backoff;
// the gate janitor bounds how long a pod is held while the API keeps failing.
// While the controller stops (ctx done, so every call fails) it is nil:
// a retry would put the pod back in a queue that the stopping workers drain
// and keep them busy past the manager's grace period; the next leader places
// the pod.
func APIError(ctx context.Context, operation string, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	metrics.APIErrorsTotal.WithLabelValues(operation).Inc()
	return err
}
