package placement

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRetryStopsWithTheController: an API error is retried after
// RetryInterval, but not once the controller's context is done (stopping).
func TestRetryStopsWithTheController(t *testing.T) {
	r := NewRetrier()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", UID: "p"}}
	if res := r.Retry(context.Background(), pod, OperationDecide, errors.New("boom")); res.RequeueAfter != RetryInterval {
		t.Fatalf("running: RequeueAfter %s, want %s", res.RequeueAfter, RetryInterval)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := r.Retry(ctx, pod, OperationDecide, context.Canceled); res.RequeueAfter != 0 {
		t.Fatalf("stopping: RequeueAfter %s, want no retry", res.RequeueAfter)
	}
}
