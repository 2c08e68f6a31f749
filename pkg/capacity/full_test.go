package capacity_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
)

// limitedPool is a NodePool of capacity type ct with limits, usage and
// requirements reqs.
func limitedPool(name, ct string, weight int32, limits, used corev1.ResourceList, reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodePool {
	np := test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: name}, Weight: weight,
		Requirements: append([]karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(karpv1.CapacityTypeLabelKey, ct)}, reqs...)})
	np.Spec.Limits = karpv1.Limits(limits)
	np.Status.Resources = used
	return np
}

func cpu(v string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v)}
}

// claimOf is a 2-cpu NodeClaim of pool; deleted: being deleted.
func claimOf(pool string, deleted bool) *karpv1.NodeClaim {
	nc := test.NodeClaim(metav1.ObjectMeta{Name: "a"}, pool)
	nc.Status.Capacity = cpu("2")
	if deleted {
		now := metav1.Now()
		nc.DeletionTimestamp, nc.Finalizers = &now, []string{"test"}
	}
	return nc
}

// TestFullNodePoolPassedOver: a NodePool whose cpu limit is 0 and that has
// no node cannot take a pod: its group goes to the next NodePool that
// serves it, or is left out (for capacity, saying why) when none does. A
// pool with room, or with no limits, serves its group.
//
// (A pool at limit 0 used to be chosen: its pods stayed Pending.)
func TestFullNodePoolPassedOver(t *testing.T) {
	ctx := context.Background()
	s, err := strategy.Parse("karpenter.sh/capacity-type=on-demand,weight=1:karpenter.sh/capacity-type=spot,weight=2")
	if err != nil {
		t.Fatal(err)
	}
	full := limitedPool("spot-full", "spot", 10, cpu("0"), nil)
	od := limitedPool("on-demand", "on-demand", 0, nil, nil)
	choose := func(objs ...client.Object) ([]catalog.Choice, []error) {
		t.Helper()
		c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).Build()
		choices, errs, err := (&capacity.NodePoolCapacity{Reader: c}).Choose(ctx, s, &corev1.Pod{}, nil, "w")
		if err != nil {
			t.Fatal(err)
		}
		return choices, errs
	}

	_, errs := choose(full, od)
	if errs[0] != nil {
		t.Fatalf("on-demand: %v, want served", errs[0])
	}
	if !errors.Is(errs[1], catalog.ErrCapacity) || !strings.Contains(errs[1].Error(), "spot-full: full: its limits leave no room for a new node (cpu 0 of 0 left) and it has no node") {
		t.Fatalf("spot: %v, want it left out for capacity, saying spot-full is full", errs[1])
	}

	choices, errs := choose(full, od, limitedPool("spot-roomy", "spot", 1, cpu("10"), cpu("2")))
	if errs[1] != nil || choices[1].PoolName() != "spot-roomy" {
		t.Fatalf("spot: %v on %q, want the next spot pool, spot-roomy", errs[1], choices[1].PoolName())
	}
}

// TestFull: which NodePools the cluster's state shows full. A limit leaves
// less than the smallest instance type the pool allows (when its
// requirements bound it), nothing of cpu, memory or nodes, or less than
// nothing; and no NodeClaim of the pool, launched or on its way, is left to
// run a pod on. Anything unknown leaves the pool in.
func TestFull(t *testing.T) {
	kwokCPU := karpv1.NodeSelectorRequirementWithMinValues{Key: "karpenter.kwok.sh/instance-cpu", Operator: corev1.NodeSelectorOpGt, Values: []string{"1"}}
	mem := func(v string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(v)}
	}
	nodes := func(v string) corev1.ResourceList { return corev1.ResourceList{"nodes": resource.MustParse(v)} }
	for _, tc := range []struct {
		name   string
		np     *karpv1.NodePool
		claims []*karpv1.NodeClaim
		want   bool
	}{
		{"cpu limit 0, no node", limitedPool("p", "spot", 0, cpu("0"), nil), nil, true},
		{"memory used up, no node", limitedPool("p", "spot", 0, mem("8Gi"), mem("8Gi")), nil, true},
		{"nodes limit 1, its only NodeClaim being deleted", limitedPool("p", "spot", 0, nodes("1"), nil),
			[]*karpv1.NodeClaim{claimOf("p", true)}, false},
		{"nodes limit 0", limitedPool("p", "spot", 0, nodes("0"), nil), nil, true},
		{"less than nothing left", limitedPool("p", "spot", 0, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
			corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}), nil, true},
		{"cpu used up, a node of its own", limitedPool("p", "spot", 0, cpu("2"), cpu("2")),
			[]*karpv1.NodeClaim{claimOf("p", false)}, false},
		{"cpu used up, only its node being deleted", limitedPool("p", "spot", 0, cpu("2"), cpu("2")),
			[]*karpv1.NodeClaim{claimOf("p", true)}, true},
		{"cpu used up, another pool's node", limitedPool("p", "spot", 0, cpu("2"), cpu("2")),
			[]*karpv1.NodeClaim{claimOf("q", false)}, true},
		{"1 cpu left, smallest type unknown", limitedPool("p", "spot", 0, cpu("3"), cpu("2")), nil, false},
		{"1 cpu left, every type has more", limitedPool("p", "spot", 0, cpu("3"), cpu("2"), kwokCPU), nil, true},
		{"2 cpu left, types of 2 cpu allowed", limitedPool("p", "spot", 0, cpu("4"), cpu("2"), kwokCPU), nil, false},
		{"no limits", limitedPool("p", "spot", 0, nil, cpu("100")), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := make([]karpv1.NodeClaim, len(tc.claims))
			for i, nc := range tc.claims {
				claims[i] = *nc
			}
			got := capacity.Full([]*karpv1.NodePool{tc.np}, claims)
			if _, full := got["p"]; full != tc.want {
				t.Errorf("full %v (%v), want %v", full, got, tc.want)
			}
		})
	}
}

// TestFullAnswerKept: the NodeClaims are listed at most once per
// FullRefresh however many pods are placed; a NodePool change (Invalidate)
// or the end of FullRefresh reads them again, so a limit raised or a node
// gone counts at once or within FullRefresh. A list that fails leaves no
// pool out.
func TestFullAnswerKept(t *testing.T) {
	ctx := context.Background()
	s, err := strategy.Parse("karpenter.sh/capacity-type=spot,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	lists, fail := 0, false
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(
		limitedPool("spot", "spot", 0, cpu("2"), cpu("2")), claimOf("spot", false)).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*karpv1.NodeClaimList); ok {
				lists++
				if fail {
					return errors.New("forbidden")
				}
			}
			return c.List(ctx, list, opts...)
		},
	})
	clk := clocktesting.NewFakePassiveClock(time.Now())
	pools := &capacity.NodePoolCapacity{Reader: c, Clock: clk}
	served := func() bool {
		t.Helper()
		_, errs, err := pools.Choose(ctx, s, &corev1.Pod{}, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return errs[0] == nil
	}
	for range 100 {
		if !served() {
			t.Fatal("spot at its limits with a node: left out, want served (room on its node is unknown)")
		}
	}
	if lists != 1 {
		t.Fatalf("NodeClaims listed %d times for 100 pods, want 1", lists)
	}

	nc := &karpv1.NodeClaim{}
	if err := c.Get(ctx, client.ObjectKey{Name: "a"}, nc); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if !served() {
		t.Fatal("within FullRefresh of the last list: want the answer kept")
	}
	clk.SetTime(clk.Now().Add(capacity.FullRefresh))
	if served() {
		t.Fatal("its node gone, FullRefresh later: served, want left out")
	}

	np := &karpv1.NodePool{}
	if err := c.Get(ctx, client.ObjectKey{Name: "spot"}, np); err != nil {
		t.Fatal(err)
	}
	np.Spec.Limits = karpv1.Limits(cpu("10"))
	if err := c.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	pools.Invalidate()
	if !served() {
		t.Fatal("limit raised: left out, want served at once")
	}

	np.Spec.Limits = karpv1.Limits(cpu("2"))
	if err := c.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
	fail = true
	pools.Invalidate()
	if !served() {
		t.Fatal("NodeClaims unreadable: left out, want served")
	}
}
