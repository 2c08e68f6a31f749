package decision

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/strategy"
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

// TestWriteAsksForTheMetadataOnly: a decision's patch asks the API server
// for the pod's metadata back, not the whole pod, and changes on the server
// what the edits changed, leaving the pod it was given (the cache's) as it
// was.
func TestWriteAsksForTheMetadataOnly(t *testing.T) {
	ctx := context.Background()
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p"}, Gated: true})
	var sent []client.Object
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod).Build(), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			sent = append(sent, obj)
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	var cached corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &cached); err != nil {
		t.Fatal(err)
	}
	before := cached.DeepCopy()
	d := Decision{Group: strategy.Group{Labels: []strategy.Label{{Key: "karpenter.sh/capacity-type", Value: "spot"}}, Weight: 1}, NodePool: "spot", Signature: "sig"}
	if err := Write(ctx, c, &cached, true, func(p *corev1.Pod) { Apply(p, d) }); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 {
		t.Fatalf("%d patches sent, want 1", len(sent))
	}
	if _, ok := sent[0].(*metav1.PartialObjectMetadata); !ok {
		t.Errorf("the patch was sent with a %T, want a *metav1.PartialObjectMetadata (the metadata back only)", sent[0])
	}
	if !equality.Semantic.DeepEqual(&cached, before) {
		t.Errorf("the pod given to Write changed:\n%+v\nwas\n%+v", cached, before)
	}
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	if HasGate(&got) || got.Annotations[annotations.NodePool] != "spot" || got.Spec.Affinity == nil {
		t.Errorf("on the server: gated %v, annotations %v, affinity %v; want the decision written", HasGate(&got), got.Annotations, got.Spec.Affinity)
	}
}
