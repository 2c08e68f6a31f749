package decision

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/test"
)

const (
	spotKey     = "karpenter.sh/capacity-type=spot"
	onDemandKey = "karpenter.sh/capacity-type=on-demand"
)

func testSigner(t *testing.T) *Signer {
	t.Helper()
	s, err := NewSigner([]byte("apportion-decision-test-key-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signedPod is a pod as the placement controller leaves it: d applied and
// signed with s.
func signedPod(s *Signer, uid string, d Decision) *corev1.Pod {
	pod := gatedPod()
	pod.UID = types.UID(uid)
	d.Signature = s.Sign(pod.UID, d.Group.Key(), d.NodePool, d.Fallback...)
	Apply(pod, d)
	return pod
}

func TestReadTakesOnlySignedDecisions(t *testing.T) {
	s := testSigner(t)
	fallback := Decision{Group: spot, NodePool: "spot", Fallback: []string{onDemandKey}}
	for _, tc := range []struct {
		name string
		pod  func() *corev1.Pod
		want *Verified
	}{
		{"signed", func() *corev1.Pod { return signedPod(s, "p1", Decision{Group: spot, NodePool: "spot"}) },
			&Verified{Group: spotKey, NodePool: "spot"}},
		{"signed fallback", func() *corev1.Pod { return signedPod(s, "p1", fallback) },
			&Verified{Group: spotKey, NodePool: "spot", Fallback: []string{onDemandKey}}},
		{"architecture only", func() *corev1.Pod {
			return signedPod(s, "p1", Decision{ArchitectureOnly: true, Architectures: []string{"arm64"}})
		}, &Verified{}},
		{"undecided", func() *corev1.Pod { return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}} }, nil},
		{"unsigned", func() *corev1.Pod {
			return test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{UID: "p1"}, Group: spotKey, NodePool: "spot"})
		}, nil},
		{"signature copied from another pod", func() *corev1.Pod {
			pod := signedPod(s, "p2", Decision{Group: spot, NodePool: "spot"})
			pod.UID = "p1"
			return pod
		}, nil},
		{"fallback added to a signed decision", func() *corev1.Pod {
			pod := signedPod(s, "p1", Decision{Group: spot, NodePool: "spot"})
			pod.Annotations[annotations.Fallback] = onDemandKey
			return pod
		}, nil},
		{"fallback changed", func() *corev1.Pod {
			pod := signedPod(s, "p1", fallback)
			pod.Annotations[annotations.Fallback] = spotKey
			return pod
		}, nil},
		{"fallback removed", func() *corev1.Pod {
			pod := signedPod(s, "p1", fallback)
			delete(pod.Annotations, annotations.Fallback)
			return pod
		}, nil},
		{"group changed", func() *corev1.Pod {
			pod := signedPod(s, "p1", Decision{Group: spot, NodePool: "spot"})
			pod.Annotations[annotations.Group] = onDemandKey
			return pod
		}, nil},
		{"another key", func() *corev1.Pod { return signedPod(RandomSigner(), "p1", Decision{Group: spot, NodePool: "spot"}) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := s.Read(tc.pod())
			if tc.want == nil {
				if ok || s.Verify(tc.pod()) == nil {
					t.Fatalf("read %+v: want no decision", got)
				}
				return
			}
			if !ok || !reflect.DeepEqual(got, *tc.want) {
				t.Fatalf("read %+v, %v: want %+v", got, ok, *tc.want)
			}
		})
	}
	var none *Signer
	if _, ok := none.Read(signedPod(s, "p1", fallback)); ok {
		t.Error("a nil Signer verified a decision")
	}
}

// TestSignatureWithoutFallbackIsUnchanged: the decisions signed before the
// signature covered the fallback still verify.
func TestSignatureWithoutFallbackIsUnchanged(t *testing.T) {
	s := testSigner(t)
	pod := signedPod(s, "p1", Decision{Group: spot, NodePool: "spot"})
	// The message the earlier releases signed: uid, group and NodePool.
	pod.Annotations[annotations.Signature] = s.sign("p1", spotKey, "spot", "", false)
	if _, ok := s.Read(pod); !ok {
		t.Fatal("a decision without fallback signed as before does not verify")
	}
	if s.Sign("p1", spotKey, "spot") == s.Sign("p1", spotKey, "spot", onDemandKey) {
		t.Fatal("the fallback does not change the signature")
	}
}

// TestApplyDropsClientDecisionAnnotations: decision annotations the pod
// carries before its decision (a client wrote them) do not survive it.
func TestApplyDropsClientDecisionAnnotations(t *testing.T) {
	s := testSigner(t)
	pod := gatedPod()
	pod.UID = "p1"
	pod.Annotations = map[string]string{
		annotations.Group: onDemandKey, annotations.NodePool: "forged", annotations.Fallback: onDemandKey,
		annotations.Signature: "forged", annotations.Decision: `{"reason":"forged"}`, "team": "web",
	}
	d := Decision{ArchitectureOnly: true, Architectures: []string{"arm64"}, Record: Record{Reason: "architecture"}}
	d.Signature = s.Sign(pod.UID, "", "")
	Apply(pod, d)
	for _, k := range []string{annotations.Group, annotations.NodePool, annotations.Fallback} {
		if v, ok := pod.Annotations[k]; ok {
			t.Errorf("%s=%q survived the decision", k, v)
		}
	}
	var rec Record
	if err := json.Unmarshal([]byte(pod.Annotations[annotations.Decision]), &rec); err != nil || rec.Reason != "architecture" {
		t.Errorf("decision record %q: %v", pod.Annotations[annotations.Decision], err)
	}
	if pod.Annotations["team"] != "web" || pod.Annotations[annotations.Architectures] != "arm64" {
		t.Errorf("annotations %v: the user's and the architectures must stay", pod.Annotations)
	}
	if v, ok := s.Read(pod); !ok || v.Group != "" || v.Fallback != nil {
		t.Errorf("read %+v, %v: want the architecture-only decision", v, ok)
	}

	// A real decision without fallback on a pod that carried a forged one.
	pod = gatedPod()
	pod.UID = "p2"
	pod.Annotations = map[string]string{annotations.Fallback: onDemandKey}
	Apply(pod, Decision{Group: spot, Signature: s.Sign("p2", spotKey, "")})
	if _, ok := pod.Annotations[annotations.Fallback]; ok {
		t.Errorf("forged fallback survived: %v", pod.Annotations)
	}
	if _, ok := s.Read(pod); !ok {
		t.Error("the decision does not verify")
	}
}
