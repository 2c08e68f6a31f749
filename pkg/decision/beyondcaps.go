package decision

import (
	"encoding/json"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// MarkBeyondCaps writes on pod (a copy, about to be released: see Release's
// edits) that apportion released it beyond caps: every group with a weight
// was at its cap, so it goes without a group and without node affinity from
// apportion, and runs wherever the scheduler puts it. What it carries: the
// annotations.BeyondCaps mark, signature (Signer.SignBeyondCaps of its UID),
// the decision record rec and, when set, its deletion cost. Any decision
// annotation the pod carried before is dropped, as by Apply.
//
// Without the mark such a pod could not be told from one admitted without
// a decision, and once bound it would count as a stray of the group its
// node serves: a capped group's node then held a pod of the group's cap,
// and the next pod the group should take went beyond caps instead.
func MarkBeyondCaps(pod *corev1.Pod, rec Record, signature string, cost *int) {
	Strip(pod)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annotations.BeyondCaps] = "true"
	pod.Annotations[annotations.Signature] = signature
	if cost != nil {
		pod.Annotations[corev1.PodDeletionCost] = strconv.Itoa(*cost)
	}
	raw, _ := json.Marshal(rec) // a struct of strings and ints cannot fail to marshal
	pod.Annotations[annotations.Decision] = string(raw)
}

// ReleasedBeyondCaps reports whether the pod carries the beyond-caps mark,
// signed or not: Signer.BeyondCaps tells whether apportion wrote it. Only
// what reads without the key (explain and status, with the user's
// credentials) takes the mark as written, as it takes a group annotation.
func ReleasedBeyondCaps(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[annotations.BeyondCaps]
	return ok
}

// BeyondCaps reports whether apportion released the pod beyond caps: the
// mark, with apportion's signature. A nil Signer verifies nothing. Pods
// without the mark cost no HMAC.
func (s *Signer) BeyondCaps(pod *corev1.Pod) bool {
	if !ReleasedBeyondCaps(pod) {
		return false
	}
	d, ok := s.Read(pod)
	return ok && d.BeyondCaps
}
