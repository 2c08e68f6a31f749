package decision

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/test"
)

// beyondCapsPod is a pod released beyond caps as the placement controller
// leaves it, signed with s.
func beyondCapsPod(s *Signer, uid string) *corev1.Pod {
	pod := gatedPod()
	pod.UID = types.UID(uid)
	cost := StrayCost
	MarkBeyondCaps(pod, Record{Strategy: "abc", Counts: []int64{2, 3}, Reason: "beyond_caps"}, s.SignBeyondCaps(pod.UID), &cost)
	RemoveGate(pod)
	return pod
}

// TestBeyondCapsReadsAsSuch: a pod released beyond caps reads as signed,
// without a group and beyond caps; changing or copying any part of it, or
// putting the mark on a decision into a group, leaves no decision; and the
// signatures of a decision without a group (architecture only, node-label
// mode) and of one beyond caps are not each other's.
func TestBeyondCapsReadsAsSuch(t *testing.T) {
	s := testSigner(t)
	pod := beyondCapsPod(s, "p1")
	if d, ok := s.Read(pod); !ok || !d.BeyondCaps || d.Group != "" || d.NodePool != "" || d.Fallback != nil {
		t.Fatalf("Read = %+v, %v; want beyond caps, signed", d, ok)
	}
	if !s.BeyondCaps(pod) || !ReleasedBeyondCaps(pod) || Decided(pod) || pod.Spec.Affinity != nil {
		t.Errorf("marked %v, decided %v, affinity %+v: want marked only", ReleasedBeyondCaps(pod), Decided(pod), pod.Spec.Affinity)
	}
	var rec Record
	if err := json.Unmarshal([]byte(pod.Annotations[annotations.Decision]), &rec); err != nil || rec.Reason != "beyond_caps" {
		t.Errorf("record %q: %v", pod.Annotations[annotations.Decision], err)
	}
	if got, want := pod.Annotations[corev1.PodDeletionCost], strconv.Itoa(StrayCost); got != want {
		t.Errorf("deletion cost %q, want StrayCost (%s)", got, want)
	}
	for name, edit := range map[string]func(*corev1.Pod){
		"mark removed":    func(p *corev1.Pod) { delete(p.Annotations, annotations.BeyondCaps) },
		"group added":     func(p *corev1.Pod) { p.Annotations[annotations.Group] = spotKey },
		"nodepool added":  func(p *corev1.Pod) { p.Annotations[annotations.NodePool] = "spot" },
		"fallback added":  func(p *corev1.Pod) { p.Annotations[annotations.Fallback] = onDemandKey },
		"another pod":     func(p *corev1.Pod) { p.UID = "p2" },
		"no signature":    func(p *corev1.Pod) { delete(p.Annotations, annotations.Signature) },
		"decision's sign": func(p *corev1.Pod) { p.Annotations[annotations.Signature] = s.Sign(p.UID, "", "") },
	} {
		p := pod.DeepCopy()
		edit(p)
		if d, ok := s.Read(p); ok || s.BeyondCaps(p) {
			t.Errorf("%s: reads as %+v (beyond caps %v)", name, d, s.BeyondCaps(p))
		}
	}
	grouped := signedPod(s, "p1", Decision{Group: spot, NodePool: "spot"})
	grouped.Annotations[annotations.BeyondCaps] = "true"
	if d, ok := s.Read(grouped); ok {
		t.Errorf("a decision into a group marked beyond caps reads as %+v", d)
	}
	var none *Signer
	if none.BeyondCaps(pod) {
		t.Error("a nil Signer verified the mark")
	}
	archOnly := signedPod(s, "p1", Decision{ArchitectureOnly: true})
	if d, ok := s.Read(archOnly); !ok || d.BeyondCaps {
		t.Errorf("an architecture-only decision reads as %+v, %v", d, ok)
	}
	if s.SignBeyondCaps("p1") == s.Sign("p1", "", "") || s.SignBeyondCaps("p1") == s.SignShadow("p1", "", "") {
		t.Error("the beyond-caps signature is a decision's or a shadow decision's")
	}
}

// TestMarkBeyondCapsDropsClientDecision: decision annotations the pod
// carries before it is marked (a client wrote them) do not survive, and
// Strip removes the mark.
func TestMarkBeyondCapsDropsClientDecision(t *testing.T) {
	s := testSigner(t)
	pod := test.Pod(test.PodOptions{Group: spotKey, NodePool: "spot", Fallback: []string{onDemandKey}, Gated: true})
	pod.UID = "p1"
	MarkBeyondCaps(pod, Record{}, s.SignBeyondCaps(pod.UID), nil)
	for _, k := range []string{annotations.Group, annotations.NodePool, annotations.Fallback, corev1.PodDeletionCost} {
		if v, ok := pod.Annotations[k]; ok {
			t.Errorf("%s=%q survived", k, v)
		}
	}
	if d, ok := s.Read(pod); !ok || !d.BeyondCaps {
		t.Errorf("Read = %+v, %v; want beyond caps", d, ok)
	}
	Strip(pod)
	if ReleasedBeyondCaps(pod) {
		t.Error("Strip left the mark")
	}
}

// TestReleaseWithEdits: Release sends the edits with the gate's removal, in
// one patch.
func TestReleaseWithEdits(t *testing.T) {
	s := testSigner(t)
	pod := gatedPod()
	pod.Namespace, pod.Name, pod.UID = "web", "p1", "p1"
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pod).Build()
	ctx := context.Background()
	var stored corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &stored); err != nil {
		t.Fatal(err)
	}
	before := maps.Clone(stored.Annotations)
	if err := Release(ctx, c, &stored, func(p *corev1.Pod) { MarkBeyondCaps(p, Record{}, s.SignBeyondCaps(p.UID), nil) }); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(stored.Annotations, before) {
		t.Error("Release changed the pod it was given")
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &stored); err != nil {
		t.Fatal(err)
	}
	if d, ok := s.Read(&stored); !ok || !d.BeyondCaps || HasGate(&stored) {
		t.Errorf("stored pod: decision %+v (%v), gated %v; want released beyond caps", d, ok, HasGate(&stored))
	}
}
