package decision

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// FuzzApplyRead: for any pod (its UID, a client's forged decision
// annotations, one user annotation) and any decision, Apply signed with the
// key yields a pod whose decision Read verifies and returns as decided, with
// the placement gate gone and other gates kept; none of the forged values
// survive unless the decision writes the same; changing the group breaks
// the signature; Strip then removes every decision key and the decision no
// longer reads.
func FuzzApplyRead(f *testing.F) {
	f.Add("p1", "spot", "spot-amd64", "", false, false, "", "", "")
	f.Add("p1", "spot", "spot", "karpenter.sh/capacity-type=on-demand", true, false, "on-demand", "forged", "forged")
	f.Add("p2", "", "", "", false, true, "a=b", "", "{}")
	f.Add("uid", "x", "", "a=b;c=d", false, false, "", "pool", "sig")
	f.Add("u", "v,w", "np", ";", true, true, "x=v,w", "np", "")
	s, err := NewSigner([]byte("apportion-decision-fuzz-key-0123456789"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, uid, value, nodePool, fallback string, preferred, archOnly bool, forgedGroup, forgedPool, forgedSig string) {
		if uid == "" {
			uid = "u" // Verify takes no decision on a pod without a UID
		}
		d := Decision{
			Group:            strategy.Group{Labels: []strategy.Label{{Key: "x", Value: value}}, Weight: 1},
			NodePool:         nodePool,
			Preferred:        preferred,
			ArchitectureOnly: archOnly,
			Architectures:    []string{"arm64"},
			Record:           Record{Strategy: "h", Counts: []int64{1}, Reason: "fuzz"},
		}
		if fallback != "" {
			d.Fallback = strings.Split(fallback, FallbackSeparator)
		}
		group := d.Group.Key()
		if archOnly {
			group = ""
		}
		d.Signature = s.Sign(types.UID(uid), group, nodePool, d.Fallback...)

		pod := gatedPod()
		pod.UID = types.UID(uid)
		pod.Annotations = map[string]string{
			annotations.Group: forgedGroup, annotations.NodePool: forgedPool, annotations.Fallback: forgedGroup,
			annotations.Signature: forgedSig, annotations.Decision: forgedSig, "team": value,
		}
		Apply(pod, d)

		v, ok := s.Read(pod)
		want := Verified{Group: group, NodePool: nodePool, Fallback: d.Fallback}
		if !ok || !reflect.DeepEqual(v, want) {
			t.Fatalf("read %+v, %v after Apply(%+v): want %+v", v, ok, d, want)
		}
		if HasGate(pod) || !slices.Equal(pod.Spec.SchedulingGates, []corev1.PodSchedulingGate{{Name: "other"}}) {
			t.Fatalf("gates %v: want only the other gate", pod.Spec.SchedulingGates)
		}
		if pod.Annotations["team"] != value {
			t.Fatalf("the user's annotation changed: %v", pod.Annotations)
		}
		written := map[string]string{annotations.Group: group, annotations.NodePool: nodePool, annotations.Fallback: strings.Join(d.Fallback, FallbackSeparator)}
		for k, w := range written {
			if got, has := pod.Annotations[k]; has != (w != "") || got != w {
				t.Fatalf("%s = %q (present %v), want %q: a client's value survived or the decision's is missing", k, got, has, w)
			}
		}
		if pod.Annotations[annotations.Signature] != d.Signature || pod.Annotations[annotations.Decision] != `{"strategy":"h","counts":[1],"reason":"fuzz"}` {
			t.Fatalf("signature %q and record %q: want the decision's", pod.Annotations[annotations.Signature], pod.Annotations[annotations.Decision])
		}

		tampered := pod.DeepCopy()
		tampered.Annotations[annotations.Group] = group + "x"
		if _, ok := s.Read(tampered); ok {
			t.Fatalf("a changed group %q still reads as signed", tampered.Annotations[annotations.Group])
		}

		Strip(pod)
		for _, k := range annotations.DecisionKeys {
			if got, has := pod.Annotations[k]; has {
				t.Fatalf("Strip left %s=%q", k, got)
			}
		}
		if Decided(pod) {
			t.Fatal("a stripped pod is decided")
		}
		if _, ok := s.Read(pod); ok {
			t.Fatal("a stripped pod's decision still reads")
		}
	})
}
