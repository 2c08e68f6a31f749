package decision

import (
	"crypto/hmac"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// Shadow is what the placement controller would have done to a pod in shadow
// mode, written as the apportion.dev/shadow annotation (compact JSON) in
// place of any change to the pod: the group, the NodePool, the architectures
// and the same Record a decision carries, signed (Signer.SignShadow) so that
// an annotation a client wrote is never taken for one.
type Shadow struct {
	// Group is the group key; "" for an architecture-only decision.
	Group string `json:"group,omitempty"`
	// NodePool is the NodePool the pod would have been pinned to; "" in
	// node-label mode.
	NodePool string `json:"nodepool,omitempty"`
	// Architectures the pod's images can run on; empty when unknown.
	Architectures []string `json:"architectures,omitempty"`
	// Record is the decision record apportion.dev/decision would hold.
	// Not kept by the informer cache (CompactShadow).
	Record *Record `json:"record,omitempty"`
	// Signature is Signer.SignShadow over the pod's UID, Group and
	// NodePool.
	Signature string `json:"signature"`
}

// ShadowOf is what d records in shadow mode: its group key (none for an
// architecture-only decision), NodePool, architectures and record, not yet
// signed.
func ShadowOf(d Decision) Shadow {
	s := Shadow{NodePool: d.NodePool, Architectures: d.Architectures, Record: &d.Record}
	if !d.ArchitectureOnly {
		s.Group = d.Group.Key()
	}
	return s
}

// WriteShadow sets the pod's apportion.dev/shadow annotation to s. pod is
// modified in place.
func WriteShadow(pod *corev1.Pod, s Shadow) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annotations.Shadow] = s.String()
}

// String is s as the annotation holds it.
func (s Shadow) String() string {
	b, _ := json.Marshal(s) // strings, string slices and ints cannot fail to marshal
	return string(b)
}

// ReadShadow returns the pod's apportion.dev/shadow annotation as written,
// WITHOUT checking its signature: for display (what apportion would have
// done). ok is false when the pod has none or it does not parse. Anything
// that counts or acts on it uses Signer.ReadShadow.
func ReadShadow(pod *corev1.Pod) (Shadow, bool) {
	if pod == nil {
		return Shadow{}, false
	}
	raw, ok := pod.Annotations[annotations.Shadow]
	if !ok {
		return Shadow{}, false
	}
	var s Shadow
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return Shadow{}, false
	}
	return s, true
}

// HasShadow reports whether the pod carries an apportion.dev/shadow
// annotation, signed or not.
func HasShadow(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[annotations.Shadow]
	return ok
}

// SignShadow is the signature of a shadow decision for group and nodePool on
// the pod with uid. It differs from Sign's for the same values: a shadow
// signature copied into apportion.dev/signature does not make a decision.
func (s *Signer) SignShadow(uid types.UID, group, nodePool string) string {
	return s.sign(shadowDomain+uid, group, nodePool, "", false)
}

// shadowDomain starts the signed message of a shadow decision, which sets it
// apart from a decision's: those start with the pod's UID, in which NUL
// cannot occur.
const shadowDomain = "shadow\x00"

// ReadShadow returns the pod's shadow decision when apportion signed it:
// ok is false for a pod without one, and for one a client wrote or changed.
// The tally counts only these.
func (s *Signer) ReadShadow(pod *corev1.Pod) (Shadow, bool) {
	sh, ok := ReadShadow(pod)
	if !ok || s == nil || pod.UID == "" || sh.Signature == "" {
		return Shadow{}, false
	}
	want := s.SignShadow(pod.UID, sh.Group, sh.NodePool)
	if !hmac.Equal([]byte(sh.Signature), []byte(want)) {
		return Shadow{}, false
	}
	return sh, true
}

// CompactShadow is the annotation value v reduced to what the tally reads
// (group, NodePool, signature): what an informer cache of pods keeps. A value
// that does not parse gives "" (it verifies as nothing: not worth keeping).
func CompactShadow(v string) string {
	var s Shadow
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return ""
	}
	return Shadow{Group: s.Group, NodePool: s.NodePool, Signature: s.Signature}.String()
}
