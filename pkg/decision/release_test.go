package decision

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/test"
)

// TestAPIErrorStopsWithTheController: a failed write is counted and
// returned for the workqueue to retry, but not once the controller's context
// is done (stopping).
func TestAPIErrorStopsWithTheController(t *testing.T) {
	counted := func() float64 { return testutil.ToFloat64(metrics.APIErrorsTotal.WithLabelValues(OperationDecide)) }
	before := counted()
	boom := errors.New("boom")
	if err := APIError(context.Background(), OperationDecide, boom); !errors.Is(err, boom) {
		t.Fatalf("running: %v, want the error returned", err)
	}
	if got := counted() - before; got != 1 {
		t.Fatalf("running: counted %v, want 1", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := APIError(ctx, OperationDecide, context.Canceled); err != nil {
		t.Fatalf("stopping: %v, want no retry", err)
	}
	if got := counted() - before; got != 1 {
		t.Fatalf("stopping: counted %v, want nothing more", got)
	}
}

// TestReleaseKeepsOtherGatesAndLocks: Release removes the placement gate
// alone, and refuses (a conflict the caller can tell) when the pod changed
// since it was read.
func TestReleaseKeepsOtherGatesAndLocks(t *testing.T) {
	ctx := context.Background()
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p"}, Gates: []string{"other"}, Gated: true})
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod).Build()
	var stale corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &stale); err != nil {
		t.Fatal(err)
	}
	if err := Release(ctx, c, stale.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if gates := got.Spec.SchedulingGates; len(gates) != 1 || gates[0].Name != "other" {
		t.Fatalf("gates %+v, want only the other gate", gates)
	}
	if err := Release(ctx, c, &stale); !apierrors.IsConflict(err) {
		t.Fatalf("stale pod: %v, want a conflict", err)
	}
}
