package decision

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

func shadowPod(s *Signer, uid string, d Decision) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}}
	sh := ShadowOf(d)
	sh.Signature = s.SignShadow(pod.UID, sh.Group, sh.NodePool)
	WriteShadow(pod, sh)
	return pod
}

func TestShadowRoundTrip(t *testing.T) {
	s := testSigner(t)
	d := Decision{Group: spot, NodePool: "spot", Architectures: []string{"amd64", "arm64"},
		Record: Record{Strategy: "abc", Revision: "r1", Counts: []int64{2, 1}, Reason: "quota"}}
	pod := shadowPod(s, "p1", d)
	if len(pod.Annotations) != 1 {
		t.Fatalf("annotations %v, want the shadow one alone", pod.Annotations)
	}
	got, ok := s.ReadShadow(pod)
	if !ok {
		t.Fatalf("a signed shadow decision does not verify: %s", pod.Annotations[annotations.Shadow])
	}
	want := Shadow{Group: spotKey, NodePool: "spot", Architectures: d.Architectures, Record: &d.Record, Signature: got.Signature}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadShadow = %+v, want %+v", got, want)
	}
	if shown, ok := ReadShadow(pod); !ok || !reflect.DeepEqual(shown, got) {
		t.Errorf("unverified ReadShadow = %+v %v", shown, ok)
	}
	// The cache keeps what the tally reads, and it still verifies.
	cached := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: pod.UID, Annotations: map[string]string{
		annotations.Shadow: CompactShadow(pod.Annotations[annotations.Shadow])}}}
	if c, ok := s.ReadShadow(cached); !ok || c.Group != spotKey || c.NodePool != "spot" || c.Record != nil || c.Architectures != nil {
		t.Errorf("compacted: %+v %v (%s)", c, ok, cached.Annotations[annotations.Shadow])
	}
	if len(cached.Annotations[annotations.Shadow]) >= len(pod.Annotations[annotations.Shadow]) {
		t.Errorf("CompactShadow kept %d bytes of %d", len(cached.Annotations[annotations.Shadow]), len(pod.Annotations[annotations.Shadow]))
	}
	if c := CompactShadow(`{"group":"a","signature":"s","junk":"` + strings.Repeat("x", 1000) + `"}`); c != `{"group":"a","signature":"s"}` {
		t.Errorf("CompactShadow kept unknown fields: %s", c)
	}
	if c := CompactShadow("not json"); c != "" {
		t.Errorf("CompactShadow of a value that does not parse: %q", c)
	}
}

func TestReadShadowTakesOnlySignedOnes(t *testing.T) {
	s := testSigner(t)
	d := Decision{Group: spot, NodePool: "spot"}
	for _, tc := range []struct {
		name string
		pod  func() *corev1.Pod
	}{
		{"none", func() *corev1.Pod { return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}} }},
		{"not JSON", func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1", Annotations: map[string]string{annotations.Shadow: "spot"}}}
		}},
		{"unsigned", func() *corev1.Pod {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}}
			WriteShadow(pod, ShadowOf(d))
			return pod
		}},
		{"forged signature", func() *corev1.Pod {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}}
			sh := ShadowOf(d)
			sh.Signature = "AAAAAAAAAAAAAAAAAAAAAA"
			WriteShadow(pod, sh)
			return pod
		}},
		{"group changed", func() *corev1.Pod {
			pod := shadowPod(s, "p1", d)
			sh, _ := ReadShadow(pod)
			sh.Group = onDemandKey
			WriteShadow(pod, sh)
			return pod
		}},
		{"copied from another pod", func() *corev1.Pod {
			pod := shadowPod(s, "p2", d)
			pod.UID = "p1"
			return pod
		}},
		{"signed with another key", func() *corev1.Pod { return shadowPod(RandomSigner(), "p1", d) }},
		{"a decision's signature", func() *corev1.Pod {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}}
			sh := ShadowOf(d)
			sh.Signature = s.Sign(pod.UID, sh.Group, sh.NodePool)
			WriteShadow(pod, sh)
			return pod
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if sh, ok := s.ReadShadow(tc.pod()); ok {
				t.Errorf("taken as a shadow decision: %+v", sh)
			}
		})
	}
}

// TestShadowSignatureIsNoDecision: a shadow decision's signature, copied into
// the decision annotations with its group and NodePool, does not verify as a
// decision.
func TestShadowSignatureIsNoDecision(t *testing.T) {
	s := testSigner(t)
	pod := shadowPod(s, "p1", Decision{Group: spot, NodePool: "spot"})
	sh, _ := s.ReadShadow(pod)
	pod.Annotations[annotations.Group] = sh.Group
	pod.Annotations[annotations.NodePool] = sh.NodePool
	pod.Annotations[annotations.Signature] = sh.Signature
	if v, ok := s.Read(pod); ok {
		t.Errorf("a shadow signature made a decision: %+v", v)
	}
}
