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
// pod's UID (so a signature cannot be copied to another pod), its group and
// its NodePool.
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
// pod with uid.
func (s *Signer) Sign(uid types.UID, group, nodePool string) string {
	mac := hmac.New(sha256.New, s.key)
	// NUL cannot occur in a UID, a group key or a NodePool name.
	mac.Write([]byte(string(uid) + "\x00" + group + "\x00" + nodePool))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
}

// ErrUnsigned is why a pod's decision annotations are not taken as a
// decision.
var ErrUnsigned = errors.New("decision annotations without apportion's signature")

// Verify reports whether the pod's decision (its group and NodePool
// annotations) carries a valid signature: nil when apportion wrote it.
func (s *Signer) Verify(pod *corev1.Pod) error {
	sig, ok := pod.Annotations[annotations.Signature]
	if !ok || pod.UID == "" {
		return ErrUnsigned
	}
	want := s.Sign(pod.UID, pod.Annotations[annotations.Group], pod.Annotations[annotations.NodePool])
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return ErrUnsigned
	}
	return nil
}
