package decision

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// MinKeySize is the shortest decision key accepted, in bytes.
const MinKeySize = 32

// Signer signs the decisions apportion writes and recognises them later.
// Annotations are tenant input: anyone who can create or patch a pod can
// write apportion.dev/group or apportion.dev/nodepool on it. A decision counts
// only with a signature made with the key every replica shares, over the
// pod's UID (so a signature cannot be copied to another pod), its group, its
// NodePool and its fallback list.
type Signer struct {
	key []byte
}

// NewSigner returns a Signer with key (at least MinKeySize bytes).
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < MinKeySize {
		return nil, fmt.Errorf("decision key has %d bytes, want at least %d", len(key), MinKeySize)
	}
	return &Signer{key: append([]byte(nil), key...)}, nil
}

// RandomSigner returns a Signer with a new random key: decisions it signs
// are recognised by this process only.
func RandomSigner() *Signer {
	key := make([]byte, MinKeySize)
	_, _ = rand.Read(key) // crypto/rand.Read never fails (it panics instead)
	return &Signer{key: key}
}

// LoadSigner reads the key from path: the file's bytes, surrounding
// whitespace removed.
func LoadSigner(path string) (*Signer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the decision key: %w", err)
	}
	s, err := NewSigner([]byte(strings.TrimSpace(string(raw))))
	if err != nil {
		return nil, fmt.Errorf("reading the decision key %s: %w", path, err)
	}
	return s, nil
}

// Sign is the signature of a decision for group (empty for an
// architecture-only decision) and nodePool (empty in node-label mode) on the
// pod with uid, placed while the groups fallback were out of capacity (none
// for a decision made with every group available). Without a fallback the
// signed message is the one earlier releases signed, so their decisions keep
// verifying after an upgrade (those with a fallback count as undecided).
func (s *Signer) Sign(uid types.UID, group, nodePool string, fallback ...string) string {
	return s.sign(uid, group, nodePool, strings.Join(fallback, FallbackSeparator), false)
}

// SignBeyondCaps is the signature of the pod with uid released beyond caps
// (MarkBeyondCaps): no group, no NodePool, no fallback.
func (s *Signer) SignBeyondCaps(uid types.UID) string {
	return s.sign(uid, "", "", "", true)
}

// sign takes the fallback as the annotation holds it.
func (s *Signer) sign(uid types.UID, group, nodePool, fallback string, beyondCaps bool) string {
	mac := hmac.New(sha256.New, s.key)
	// NUL cannot occur in a UID, a group key, a NodePool name or a list of
	// group keys: a decision's message holds 2 or 3 of them (a shadow
	// decision's 3, shadowDomain's among them), one beyond caps 4, so no
	// signature verifies as another kind.
	msg := string(uid) + "\x00" + group + "\x00" + nodePool
	if fallback != "" {
		msg += "\x00" + fallback
	}
	if beyondCaps {
		msg += "\x00\x00" + annotations.BeyondCaps
	}
	mac.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
}

// ErrUnsigned is why a pod's decision annotations are not taken as a
// decision.
var ErrUnsigned = errors.New("decision annotations without apportion's signature")

// Verify reports whether the pod's decision (its group, NodePool, fallback
// and beyond-caps annotations) carries a valid signature: nil when apportion wrote
// it. A nil Signer verifies nothing.
func (s *Signer) Verify(pod *corev1.Pod) error {
	if s == nil || pod == nil {
		return ErrUnsigned
	}
	sig, ok := pod.Annotations[annotations.Signature]
	if !ok || pod.UID == "" {
		return ErrUnsigned
	}
	want := s.sign(pod.UID, pod.Annotations[annotations.Group], pod.Annotations[annotations.NodePool], pod.Annotations[annotations.Fallback], ReleasedBeyondCaps(pod))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return ErrUnsigned
	}
	return nil
}

// Verified is a pod's decision as apportion wrote it.
type Verified struct {
	// Group is the group key; "" for an architecture-only decision.
	Group string
	// NodePool is the pinned NodePool; "" in node-label mode and for
	// architecture-only decisions.
	NodePool string
	// Fallback lists the groups that were out of capacity when the pod
	// was placed; nil when every group was available.
	Fallback []string
	// BeyondCaps: the pod was released without a group because every
	// group with a weight was at its cap (Group is ""). It counts in no
	// group, whatever node it runs on.
	BeyondCaps bool
}

// Read returns the pod's decision when apportion signed it. ok is false for
// a pod without a decision and for one whose decision annotations a client
// wrote or changed (kubectl annotate, a forged create the webhook did not
// see): every consumer treats such a pod exactly as an undecided one.
func (s *Signer) Read(pod *corev1.Pod) (v Verified, ok bool) {
	if s.Verify(pod) != nil {
		return Verified{}, false
	}
	v.Group = pod.Annotations[annotations.Group]
	v.NodePool = pod.Annotations[annotations.NodePool]
	if fb := pod.Annotations[annotations.Fallback]; fb != "" {
		v.Fallback = strings.Split(fb, FallbackSeparator)
	}
	v.BeyondCaps = ReleasedBeyondCaps(pod)
	return v, true
}
