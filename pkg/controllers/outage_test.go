package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// TestQuotaAfterOutage: seed 004 with spot out of capacity for its first k
// pods (on-demand takes them, by fallback), then back: the workload scales
// up to n through the placement controller and down to one pod, the
// ReplicaSet controller removing the lowest deletion cost each time, the
// deletion-cost controller run after every change. From the first scale-up
// after the outage, every size is within quota or as close as the pods that
// exist allow (going up, the outage's pods stay; going down, only the pods of
// the largest size are left), never further.
func TestQuotaAfterOutage(t *testing.T) {
	s, err := strategy.Parse(seed004)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := compiled.New(s)
	if err != nil {
		t.Fatal(err)
	}
	m := cs.Method
	for _, tc := range []struct{ k, n int }{{2, 8}, {4, 12}, {6, 10}, {10, 40}, {20, 50}} {
		t.Run(fmt.Sprintf("outage %d up to %d", tc.k, tc.n), func(t *testing.T) {
			h := newWriteHarness(t, 1)
			rs := h.rs[0]
			h.tracker.Mark(capacity.PoolKey("spot"), "limits")
			for i := range tc.k {
				h.place(t, rs, i)
			}
			h.drain(t)
			h.tracker.Lift(capacity.PoolKey("spot"))
			floor := h.split(t, cs)
			if floor[0] != int64(tc.k) {
				t.Fatalf("split %v after the outage, want every pod on-demand", floor)
			}
			for i := tc.k; i < tc.n; i++ {
				h.place(t, rs, i)
				h.drain(t)
				got := h.split(t, cs)
				if off, best := m.OffQuota(got, apportion.All), closest(m, int64(i+1), floor, got); off > best {
					t.Fatalf("scaling up to %d reached %v, %d off quota, where %d is possible", i+1, got, off, best)
				}
			}
			peak := h.split(t, cs)
			for size := tc.n - 1; size >= 1; size-- {
				h.removeCheapest(t)
				h.drain(t)
				got := h.split(t, cs)
				if off, best := m.OffQuota(got, apportion.All), closest(m, int64(size), []int64{0, 0}, peak); off > best {
					t.Fatalf("scaled up to %v, scaling down to %d reached %v, %d off quota, where %d is possible", peak, size, got, off, best)
				}
			}
		})
	}
}

// closest is the least OffQuota of the splits of n pods over two groups
// that fit between lo and hi: what the pods that exist allow.
func closest(m *apportion.Method, n int64, lo, hi []int64) int64 {
	best := int64(-1)
	for od := lo[0]; od <= min(hi[0], n); od++ {
		if spot := n - od; spot >= lo[1] && spot <= hi[1] {
			if off := m.OffQuota([]int64{od, spot}, apportion.All); best < 0 || off < best {
				best = off
			}
		}
	}
	return best
}

// split counts the revision's pods per group of cs.
func (h *writeHarness) split(t *testing.T, cs *compiled.Strategy) []int64 {
	t.Helper()
	counts := make([]int64, len(cs.Strategy.Groups))
	for _, p := range h.revisionPods(t, h.request()) {
		g, ok := cs.Index[p.Annotations[annotations.Group]]
		if !ok {
			t.Fatalf("%s: group %q not in the strategy", p.Name, p.Annotations[annotations.Group])
		}
		counts[g]++
	}
	return counts
}

func (h *writeHarness) request() reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(h.rs[0].UID)}}
}

// removeCheapest deletes the pod of lowest deletion cost, as the ReplicaSet
// controller scaling down by one (its pods all run), and shows the deletion
// to both controllers.
func (h *writeHarness) removeCheapest(t *testing.T) {
	t.Helper()
	pods := h.revisionPods(t, h.request())
	low := slices.MinFunc(pods, func(a, b *corev1.Pod) int {
		ca, _ := decision.DeletionCost(a)
		cb, _ := decision.DeletionCost(b)
		return ca - cb
	})
	if _, ok := decision.DeletionCost(low); !ok {
		t.Fatalf("%s has no deletion cost", low.Name)
	}
	if err := h.raw.Delete(context.Background(), low); err != nil { // the ReplicaSet controller's write
		t.Fatal(err)
	}
	h.tally.Forget(low)
	h.costs.EventHandler().Delete(context.Background(), event.DeleteEvent{Object: low}, h.queue)
}
