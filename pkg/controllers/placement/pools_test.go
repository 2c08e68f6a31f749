package placement_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// TestNodeLabelCapacityListsOnlyWhenInvalidated: node-label mode answers
// from what it learned until Invalidate, then reads the nodes again.
func TestNodeLabelCapacityListsOnlyWhenInvalidated(t *testing.T) {
	ctx := context.Background()
	node := func(name, size string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nodesize": size}}}
	}
	lists := 0
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(node("a", "small")).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists++
			return c.List(ctx, list, opts...)
		},
	})
	s, err := strategy.Parse("nodesize=small,weight=1:nodesize=large,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	capacity := &placement.NodeLabelCapacity{Reader: c}
	served := func() [2]bool {
		t.Helper()
		_, errs, err := capacity.Choose(ctx, s, &corev1.Pod{})
		if err != nil {
			t.Fatal(err)
		}
		return [2]bool{errs[0] == nil, errs[1] == nil}
	}

	if got := served(); got != [2]bool{true, false} {
		t.Fatalf("one small node: served %v, want small only", got)
	}
	if err := c.Create(ctx, node("b", "large")); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != [2]bool{true, false} || lists != 1 {
		t.Fatalf("before Invalidate: served %v after %d lists; want the remembered answer and 1 list", got, lists)
	}
	capacity.Invalidate()
	if got := served(); got != [2]bool{true, true} || lists != 2 {
		t.Fatalf("after Invalidate: served %v after %d lists; want both groups and 2 lists", got, lists)
	}
}
