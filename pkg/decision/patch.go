package decision

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Write sends, in one patch (Patch: with lock, an optimistic one), what
// edits change on a copy of pod: Apply, WriteShadow, MarkBeyondCaps or
// RemoveGate, which change only the annotations, the affinity, the
// tolerations and the scheduling gates. pod itself is left as it is (it
// may be the cache's).
//
// Per pod of a burst, on the leader, this is what it spends: only those
// four fields are copied, not the pod (Editable); and the patch asks for
// the pod's metadata back, not the whole pod, so that the API server
// encodes, and apportion decodes, a fraction of it (nothing reads the
// answer but its error).
func Write(ctx context.Context, kubeClient client.Client, pod *corev1.Pod, lock bool, edits ...func(*corev1.Pod)) error {
	patched := Editable(pod)
	for _, edit := range edits {
		edit(patched)
	}
	patch, err := Patch(pod, patched, lock)
	if err != nil {
		return err
	}
	return kubeClient.Patch(ctx, metadataOf(pod), patch)
}

// Editable is a copy of pod that Apply, WriteShadow, MarkBeyondCaps and
// RemoveGate may change: its annotations, affinity, tolerations and
// scheduling gates are its own; every other field is shared with pod, so
// the copy must not be changed otherwise. A pod's DeepCopy copies its
// containers, volumes, status and managed fields too, for every decision.
func Editable(pod *corev1.Pod) *corev1.Pod {
	c := *pod
	c.Annotations = maps.Clone(pod.Annotations)
	c.Spec.Affinity = pod.Spec.Affinity.DeepCopy()
	c.Spec.Tolerations = slices.Clone(pod.Spec.Tolerations)
	c.Spec.SchedulingGates = slices.Clone(pod.Spec.SchedulingGates)
	return &c
}

// metadataOf is pod as an object whose patch brings back only its
// metadata: the client asks the API server for a PartialObjectMetadata.
func metadataOf(pod *corev1.Pod) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
	}
}

// Patch is the JSON merge patch that turns orig into patched, where patched
// is orig after Apply, WriteShadow or RemoveGate: those change only the
// annotations, the affinity, the tolerations and the scheduling gates, and
// the patch names only those. With lock it also carries orig's
// resourceVersion, so that the API server refuses it (409) when the pod
// changed meanwhile, as client.MergeFromWithOptimisticLock does.
//
// It is built from the four fields instead of diffing the two pods'
// JSON (client.MergeFrom marshals both pods whole, parses them back and
// compares every field): one decision per pod on the leader, in bursts of
// thousands, made that diff a twentieth of the leader's CPU.
func Patch(orig, patched *corev1.Pod, lock bool) (client.Patch, error) {
	var p podPatch
	if lock {
		p.Metadata.ResourceVersion = orig.ResourceVersion
	}
	for k, v := range patched.Annotations {
		if old, ok := orig.Annotations[k]; !ok || old != v {
			p.annotation(k, &v)
		}
	}
	for k := range orig.Annotations {
		if _, ok := patched.Annotations[k]; !ok {
			p.annotation(k, nil)
		}
	}
	var err error
	if !equality.Semantic.DeepEqual(orig.Spec.Affinity, patched.Spec.Affinity) {
		p.Spec.Affinity, err = field(patched.Spec.Affinity)
	}
	if err == nil && !equality.Semantic.DeepEqual(orig.Spec.Tolerations, patched.Spec.Tolerations) {
		p.Spec.Tolerations, err = field(patched.Spec.Tolerations)
	}
	if err == nil && !equality.Semantic.DeepEqual(orig.Spec.SchedulingGates, patched.Spec.SchedulingGates) {
		p.Spec.SchedulingGates, err = field(patched.Spec.SchedulingGates)
	}
	var data []byte
	if err == nil {
		data, err = json.Marshal(&p)
	}
	if err != nil {
		return nil, fmt.Errorf("encoding the pod patch: %w", err)
	}
	return client.RawPatch(types.MergePatchType, data), nil
}

// podPatch is a merge patch of a pod. A field left nil is not in the
// patch; a present field holding JSON null removes the pod's value.
type podPatch struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion,omitempty"`
		// A nil value (JSON null) deletes the annotation.
		Annotations map[string]*string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Affinity        *json.RawMessage `json:"affinity,omitempty"`
		Tolerations     *json.RawMessage `json:"tolerations,omitempty"`
		SchedulingGates *json.RawMessage `json:"schedulingGates,omitempty"`
	} `json:"spec"`
}

func (p *podPatch) annotation(k string, v *string) {
	if p.Metadata.Annotations == nil {
		p.Metadata.Annotations = map[string]*string{}
	}
	p.Metadata.Annotations[k] = v
}

// field is v's JSON as a patch value: null when v is nil or empty, which
// removes the field (an empty list and no list are the same to the API).
func field[T any](v T) (*json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	raw := json.RawMessage(b)
	if string(b) == "[]" {
		raw = json.RawMessage("null")
	}
	return &raw, nil
}
