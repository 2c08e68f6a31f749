package capacity_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
)

// TestNodeLabelCapacityListsOnlyWhenInvalidated: node-label mode answers
// from what it learned until Invalidate, then reads the nodes again.
func TestNodeLabelCapacityListsOnlyWhenInvalidated(t *testing.T) {
	ctx := context.Background()
	node := func(name, size string) *corev1.Node {
		return test.Node(name, map[string]string{"nodesize": size})
	}
	lists := 0
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(node("a", "small")).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists++
			return c.List(ctx, list, opts...)
		},
	})
	s, err := strategy.Parse("nodesize=small,weight=1:nodesize=large,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	nodes := &capacity.NodeLabelCapacity{Reader: c}
	served := func() [2]bool {
		t.Helper()
		_, errs, err := nodes.Choose(ctx, s, &corev1.Pod{}, nil, "")
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
	nodes.Invalidate()
	if got := served(); got != [2]bool{true, true} || lists != 2 {
		t.Fatalf("after Invalidate: served %v after %d lists; want both groups and 2 lists", got, lists)
	}
}

// TestNodeLabelCapacityArchitectures: with the images' architectures, a group
// is served only by a node that has its labels and one of them, and a group
// naming another architecture is never served.
func TestNodeLabelCapacityArchitectures(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(
		test.Node("a", map[string]string{"pool": "x", corev1.LabelArchStable: "amd64"}),
		test.Node("b", map[string]string{"pool": "y", corev1.LabelArchStable: "arm64"}),
	).Build()
	s, err := strategy.Parse("pool=x,weight=1:pool=y,weight=1:kubernetes.io/arch=arm64,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	nodes := &capacity.NodeLabelCapacity{Reader: c}
	for _, tc := range []struct {
		archs []string
		want  [3]bool
	}{
		{nil, [3]bool{true, true, true}},
		{[]string{"amd64"}, [3]bool{true, false, false}},
		{[]string{"arm64"}, [3]bool{false, true, true}},
		{[]string{"amd64", "arm64"}, [3]bool{true, true, true}},
	} {
		_, errs, err := nodes.Choose(ctx, s, &corev1.Pod{}, tc.archs, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := [3]bool{errs[0] == nil, errs[1] == nil, errs[2] == nil}; got != tc.want {
			t.Errorf("archs %v: served %v, want %v (%v)", tc.archs, got, tc.want, errs)
		}
	}
}

// TestNodeLabelCapacityScaleFromZeroAndTracker: with scale-from-zero a group
// without nodes is still served; the tracker leaves a group out either way.
func TestNodeLabelCapacityScaleFromZeroAndTracker(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(
		test.Node("a", map[string]string{"pool": "x"})).Build()
	s, err := strategy.Parse("pool=x,weight=1:pool=y,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	tracker := capacity.NewTracker(clock.RealClock{}, time.Hour, time.Hour)
	nodes := &capacity.NodeLabelCapacity{Reader: c, Tracker: tracker, ScaleFromZero: true}
	_, errs, err := nodes.Choose(ctx, s, &corev1.Pod{}, nil, "")
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("scale from zero: %v %v, want both groups served", errs, err)
	}
	tracker.Mark(capacity.LabelsKey("pool=x"), "timeout")
	_, errs, _ = nodes.Choose(ctx, s, &corev1.Pod{}, nil, "")
	if !errors.Is(errs[0], catalog.ErrCapacity) || errs[1] != nil {
		t.Fatalf("pool=x out: %v, want it left out for capacity", errs)
	}
}

// TestUnusedLabelKeyNamedFirst: a group left out because one of its label
// keys is on no NodePool and no node says so first, a typo being the likely
// cause; a key that some node carries, or a group whose key some pool names,
// gets no such words. The nodes are listed once until InvalidateNodes.
func TestUnusedLabelKeyNamedFirst(t *testing.T) {
	ctx := context.Background()
	lists := 0
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(
		test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: "small"}, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement("nodesize", "small")}}),
		test.Node("static", map[string]string{"nodegroup": "legacy"}),
	).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*metav1.PartialObjectMetadataList); ok {
				lists++
			}
			return c.List(ctx, list, opts...)
		},
	})
	s, err := strategy.Parse("nodesize=small,weight=1:nodesiez=large,weight=1:nodegroup=legacy,weight=1:nodesize=large,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	pools := &capacity.NodePoolCapacity{Reader: c}
	for range 2 {
		_, errs, err := pools.Choose(ctx, s, &corev1.Pod{}, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if errs[0] != nil {
			t.Fatalf("nodesize=small: %v, want served", errs[0])
		}
		const typo = `label key "nodesiez" is on no NodePool and no node (a typo?); no NodePool can serve the group: small: group: `
		if !errors.Is(errs[1], catalog.ErrNoPool) || !strings.HasPrefix(errs[1].Error(), typo) {
			t.Errorf("nodesiez=large: %v, want it to start with %s", errs[1], typo)
		}
		for _, e := range errs[2:] {
			if !errors.Is(e, catalog.ErrNoPool) || strings.Contains(e.Error(), "a typo?") {
				t.Errorf("%v, want no NodePool without the typo words", e)
			}
		}
	}
	if lists != 1 {
		t.Errorf("nodes listed %d times, want 1", lists)
	}
	pools.InvalidateNodes()
	if _, _, err := pools.Choose(ctx, s, &corev1.Pod{}, nil, ""); err != nil || lists != 2 {
		t.Errorf("after InvalidateNodes: %v, %d lists; want 2", err, lists)
	}

	nodes := &capacity.NodeLabelCapacity{Reader: c}
	_, errs, err := nodes.Choose(ctx, s, &corev1.Pod{}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := `label key "nodesize" is on no node (a typo?); no node has the labels nodesize=small`; errs[0] == nil || errs[0].Error() != want {
		t.Errorf("node-label mode, nodesize=small: %v, want %s", errs[0], want)
	}
	if errs[2] != nil {
		t.Errorf("node-label mode, nodegroup=legacy: %v, want served", errs[2])
	}
}
