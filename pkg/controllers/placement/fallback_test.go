package placement_test

import (
	"strings"

	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
)

// TestPoolOutOfCapacityFallsBack: with the spot pool out of capacity, seed
// 004's pods all go on-demand, recorded as fallback; once it is back, new
// pods go to spot again (the split catches up).
func TestPoolOutOfCapacityFallsBack(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	tracker := capacity.NewTracker(f.clock, time.Minute, 10*time.Minute)
	f.ctrl = placement.NewController(f.clock, f.client, f.recorder, &capacity.NodePoolCapacity{Reader: f.client, Tracker: tracker}, f.tally, 30*time.Second)
	tracker.Mark(capacity.PoolKey("spot"), "limits")
	for i := range 4 {
		pod := f.reconcile(t, f.gatedPod(t, i))
		if pod.Annotations[annotations.NodePool] != "od" || pod.Annotations[annotations.Fallback] != "karpenter.sh/capacity-type=spot" ||
			!strings.Contains(pod.Annotations[annotations.Decision], `"reason":"fallback"`) {
			t.Fatalf("pod %d: annotations %v, want on-demand by fallback", i, pod.Annotations)
		}
	}
	if ev := drainEvents(f); !strings.Contains(ev, "GroupUnavailable") || !strings.Contains(ev, "out of capacity (limits)") {
		t.Fatalf("events:\n%s\nwant GroupUnavailable saying why", ev)
	}
	f.clock.Step(time.Minute + time.Second)
	for i := 4; i < 8; i++ {
		pod := f.reconcile(t, f.gatedPod(t, i))
		if pod.Annotations[annotations.NodePool] != "spot" || pod.Annotations[annotations.Fallback] != "" ||
			!strings.Contains(pod.Annotations[annotations.Decision], `"reason":"quota"`) {
			t.Fatalf("pod %d after the outage: annotations %v, want spot by quota", i, pod.Annotations)
		}
	}
}

// TestFullPoolLeftOutBeforePlacing: a spot pool whose cpu limit is 0 and
// that has no node is left out before any pod is placed there, with no
// outage marked: seed 004's pods all go on-demand, recorded as fallback
// with why, and a GroupUnavailable Event says so.
//
// (They used to go to spot by quota and stay Pending.)
func TestFullPoolLeftOutBeforePlacing(t *testing.T) {
	spot := nodePool("spot", 5, "spot")
	spot.Spec.Limits = karpv1.Limits(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0")})
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), spot)
	tracker := capacity.NewTracker(f.clock, time.Minute, 10*time.Minute)
	f.ctrl = placement.NewController(f.clock, f.client, f.recorder, &capacity.NodePoolCapacity{Reader: f.client, Tracker: tracker, Clock: f.clock}, f.tally, 30*time.Second)
	for i := range 6 {
		pod := f.reconcile(t, f.gatedPod(t, i))
		if pod.Annotations[annotations.NodePool] != "od" || pod.Annotations[annotations.Fallback] != "karpenter.sh/capacity-type=spot" ||
			!strings.Contains(pod.Annotations[annotations.Decision], `"reason":"fallback"`) ||
			!strings.Contains(pod.Annotations[annotations.Decision], "spot: full: its limits leave no room for a new node (cpu 0 of 0 left)") {
			t.Fatalf("pod %d: annotations %v, want on-demand by fallback, the record saying spot is full", i, pod.Annotations)
		}
	}
	if ev := drainEvents(f); !strings.Contains(ev, "GroupUnavailable") || !strings.Contains(ev, "spot: full") {
		t.Fatalf("events:\n%s\nwant GroupUnavailable saying spot is full", ev)
	}
	if len(tracker.Snapshot()) != 0 {
		t.Fatalf("outages %v, want none: a full pool is no outage", tracker.Snapshot())
	}
}

// TestOutOfCapacityPoolPassesToTheNextPool: a group with two pools goes to
// the second while the first is out, and is not a fallback.
func TestOutOfCapacityPoolPassesToTheNextPool(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"), nodePool("spot-2", 1, "spot"))
	tracker := capacity.NewTracker(f.clock, time.Minute, 10*time.Minute)
	f.ctrl = placement.NewController(f.clock, f.client, f.recorder, &capacity.NodePoolCapacity{Reader: f.client, Tracker: tracker}, f.tally, 30*time.Second)
	tracker.Mark(capacity.PoolKey("spot"), "timeout")
	pools := map[string]int{}
	for i := range 4 {
		pod := f.reconcile(t, f.gatedPod(t, i))
		if pod.Annotations[annotations.Fallback] != "" {
			t.Fatalf("pod %d marked fallback though its group was served: %v", i, pod.Annotations)
		}
		pools[pod.Annotations[annotations.NodePool]]++
	}
	if pools["od"] != 2 || pools["spot-2"] != 2 || pools["spot"] != 0 {
		t.Fatalf("pools %v, want od 2 and spot-2 2", pools)
	}
}

// TestDecisionsCarryTheirDeletionCost: a pod takes the cost of its rank in
// the group it runs in, minus its place on the engine's path (od od spot spot
// od spot spot spot od ...), fallback pods too: the on-demand pods placed
// while spot is out are on-demand's 3rd and 4th (path places 4 and 8), and
// once spot is back its pods take spot's next ranks (places 3 and 5), above
// them in the order a scale-down goes.
func TestDecisionsCarryTheirDeletionCost(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	tracker := capacity.NewTracker(f.clock, time.Minute, 10*time.Minute)
	f.ctrl = placement.NewController(f.clock, f.client, f.recorder, &capacity.NodePoolCapacity{Reader: f.client, Tracker: tracker}, f.tally, 30*time.Second)
	cost := func(p *corev1.Pod) int {
		n, ok := decision.DeletionCost(p)
		if !ok {
			t.Fatalf("%s: no deletion cost in %v", p.Name, p.Annotations)
		}
		return n
	}
	for i := range 3 {
		if got := cost(f.reconcile(t, f.gatedPod(t, i))); got != decision.SplitCost(i+1) {
			t.Fatalf("pod %d placed by quota: cost %d, want %d", i, got, decision.SplitCost(i+1))
		}
	}
	tracker.Mark(capacity.PoolKey("spot"), "limits")
	for i, want := range []int{3: -4, 4: -8} {
		if i < 3 {
			continue
		}
		pod := f.reconcile(t, f.gatedPod(t, i))
		if pod.Annotations[annotations.Fallback] == "" {
			t.Fatalf("pod %d not placed by fallback: %v", i, pod.Annotations)
		}
		if got := cost(pod); got != want {
			t.Fatalf("fallback pod %d: cost %d, want %d", i, got, want)
		}
	}
	f.clock.Step(time.Minute + time.Second)
	for i, want := range []int{5: -3, 6: -5} {
		if i < 5 {
			continue
		}
		pod := f.reconcile(t, f.gatedPod(t, i))
		if pod.Annotations[annotations.NodePool] != "spot" {
			t.Fatalf("pod %d after the outage: annotations %v, want spot", i, pod.Annotations)
		}
		if got := cost(pod); got != want {
			t.Fatalf("spot pod %d after the outage: cost %d, want %d", i, got, want)
		}
	}
}
