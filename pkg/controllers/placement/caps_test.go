package placement_test

import (
	"context"
	"reflect"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/test"
)

const (
	capsOD     = "karpenter.sh/capacity-type=on-demand"
	capsSpot   = "karpenter.sh/capacity-type=spot"
	bothCapped = capsOD + ",weight=1,max=2:" + capsSpot + ",weight=1,max=3"
)

// capsFixture is bothCapped at 7 replicas: 2 on-demand, 3 spot, 2 beyond
// caps, each pod bound to a node of its group, the pods beyond caps to a
// spot node (they run wherever the scheduler puts them, a capped group's
// nodes included). The tally follows the pods and their nodes.
func capsFixture(t *testing.T) (*fixture, *decision.Signer, []*corev1.Pod) {
	t.Helper()
	signer := decision.RandomSigner()
	f := newFixture(t, map[string]string{annotations.Strategy: bothCapped},
		test.Node("od-node", map[string]string{"karpenter.sh/capacity-type": "on-demand"}),
		test.Node("spot-node", map[string]string{"karpenter.sh/capacity-type": "spot"}),
		nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	f.ctrl.WithSigner(signer).WithNodes(f.client)
	f.tally.WithSigner(signer)
	pods := make([]*corev1.Pod, 7)
	for i := range pods {
		pods[i] = f.place(t, i)
	}
	return f, signer, pods
}

// place decides the fixture's pod i and binds it: to od-node when it went to
// on-demand, to spot-node otherwise.
func (f *fixture) place(t *testing.T, i int) *corev1.Pod {
	t.Helper()
	pod := f.reconcile(t, f.gatedPod(t, i))
	if len(pod.Spec.SchedulingGates) != 0 {
		t.Fatalf("pod %d still gated", i)
	}
	pod.Spec.NodeName = "spot-node"
	if pod.Annotations[annotations.Group] == capsOD {
		pod.Spec.NodeName = "od-node"
	}
	if err := f.client.Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	f.tally.Observe(pod)
	return pod
}

// capsSplit counts the pods on-demand, on spot and beyond caps (released
// without a group).
func capsSplit(pods []*corev1.Pod) (od, spot, beyond int) {
	for _, p := range pods {
		switch p.Annotations[annotations.Group] {
		case capsOD:
			od++
		case capsSpot:
			spot++
		default:
			beyond++
		}
	}
	return od, spot, beyond
}

// TestBeyondCapsPodsAreNotStrays: at 7 replicas of 2 on-demand (max 2) and
// 3 spot (max 3), the 2 pods beyond caps run on a spot node. A spot pod
// replaced (deleted, and the ReplicaSet's new pod placed) goes back to
// spot, again and again: the pods beyond caps are not counted as spot
// strays, so spot keeps room for its 3 and the split stays 2/3/2.
func TestBeyondCapsPodsAreNotStrays(t *testing.T) {
	f, _, pods := capsFixture(t)
	if od, spot, beyond := capsSplit(pods); od != 2 || spot != 3 || beyond != 2 {
		t.Fatalf("7 replicas: %d on-demand, %d spot, %d beyond caps; want 2/3/2", od, spot, beyond)
	}
	ctx := context.Background()
	for round := range 5 {
		victim := -1
		for i, p := range pods {
			if p.Annotations[annotations.Group] == capsSpot {
				victim = i
				break
			}
		}
		if victim < 0 {
			t.Fatalf("round %d: no spot pod left to replace", round)
		}
		if err := f.client.Delete(ctx, pods[victim]); err != nil {
			t.Fatal(err)
		}
		f.tally.Forget(pods[victim])
		pods[victim] = f.place(t, 100+round)
		if got := pods[victim].Annotations[annotations.Group]; got != capsSpot {
			t.Errorf("round %d: the replacement of a spot pod went to %q, want spot (decision %s)", round, got, pods[victim].Annotations[annotations.Decision])
		}
		if od, spot, beyond := capsSplit(pods); od != 2 || spot != 3 || beyond != 2 {
			t.Fatalf("round %d: %d on-demand, %d spot, %d beyond caps; want 2/3/2", round, od, spot, beyond)
		}
	}
}

// TestBeyondCapsPodsCarryTheirDecision: a pod released beyond caps has no
// group and no node affinity from apportion, and carries a decision that
// says so: the beyond-caps mark, signed, the record (the counts it saw,
// reason beyond_caps) and the lowest deletion cost of the revision.
func TestBeyondCapsPodsCarryTheirDecision(t *testing.T) {
	_, signer, pods := capsFixture(t)
	for _, p := range pods[5:] {
		if p.Spec.Affinity != nil {
			t.Errorf("%s: affinity %+v, want none", p.Name, p.Spec.Affinity)
		}
		d, ok := signer.Read(p)
		if !ok || !d.BeyondCaps || d.Group != "" || d.NodePool != "" || d.Fallback != nil {
			t.Errorf("%s: decision %+v (signed %v), want beyond caps without a group; annotations %v", p.Name, d, ok, p.Annotations)
		}
		rec := recordOf(t, p)
		if rec.Reason != placement.RecordBeyondCaps || !reflect.DeepEqual(rec.Counts, []int64{2, 3}) {
			t.Errorf("%s: record %+v, want reason %s after 2 on-demand and 3 spot", p.Name, rec, placement.RecordBeyondCaps)
		}
		if got, want := p.Annotations[corev1.PodDeletionCost], strconv.Itoa(decision.StrayCost); got != want {
			t.Errorf("%s: deletion cost %q, want the lowest, %s", p.Name, got, want)
		}
	}
	for _, p := range pods[:5] {
		if d, ok := signer.Read(p); !ok || d.BeyondCaps || d.Group == "" {
			t.Errorf("%s: decision %+v (signed %v), want a group", p.Name, d, ok)
		}
	}
}
