// Package podcache holds the pod informer's objects in a compact form. A
// *corev1.Pod costs 1,280 bytes of heap before any of its strings, maps or
// slices; a cached Pod keeps what the operator's transform keeps of a pod
// in about a quarter of that, and shares with the other pods of its
// revision and group what they have in common (namespace, labels, owner,
// the annotations but for the signature, the deletion cost and the shadow
// decision, the scheduling
// fields).
//
// The informer's store holds *Pod. Reads through the cache are unchanged:
// controller-runtime's Get and List deep-copy the stored object
// (DeepCopyObject), which gives a full *corev1.Pod. What receives the stored
// object itself (informer event handlers, predicates, field indexers, and
// the placement controller, which reads each pod from the informer's store
// instead of a Get's copy) reads it through View. A List with
// client.UnsafeDisableDeepCopy cannot fill a PodList from a *Pod: pod lists
// are always deep-copied.
//
// Cached objects are never mutated: the shared maps and slices are read by
// every pod of a shape.
package podcache

import (
	"maps"
	"reflect"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// Pod is a cached pod. Its ObjectMeta holds the pod's own fields (name, UID,
// resourceVersion, timestamps) and points, for the others, into its shape;
// its Annotations are the shape's, without the per-pod ones (GetAnnotations
// gives them all).
type Pod struct {
	metav1.ObjectMeta
	shape *shape
	where unique.Handle[placement]
	// own are the values of perPodKeys, set only when not empty.
	own   [len(perPodKeys)]string
	extra *extra
}

// perPodKeys are the annotations whose values differ from pod to pod: kept
// out of the shared annotations, or no two pods would share them.
var perPodKeys = [...]string{annotations.Signature, corev1.PodDeletionCost}

// shadowSlot is the slot of own that holds, instead of a signature, the
// apportion.dev/shadow decision of a pod decided in shadow mode (which
// carries its own signature, and no other): a third slot would cost every
// cached pod 32 bytes. The value tells which: a shadow decision is JSON (it
// starts with '{'), a signature is base64url (it never does). A value that
// would be ambiguous (a signature a client wrote starting with '{', a shadow
// value that does not, or both keys on one pod) stays in the shared
// annotations: correct, only not shared.
const shadowSlot = 0

// slotKey is the annotation own[i] holds.
func (p *Pod) slotKey(i int) string {
	if i == shadowSlot && strings.HasPrefix(p.own[i], "{") {
		return annotations.Shadow
	}
	return perPodKeys[i]
}

// shape is what the pods of one revision and group have in common.
type shape struct {
	namespace, generateName string
	labels, annotations     map[string]string
	owners                  []metav1.OwnerReference
	finalizers              []string
	nodeSelector            map[string]string
	affinity                *corev1.Affinity
	tolerations             []corev1.Toleration
	gates                   []corev1.PodSchedulingGate
}

// placement is where the pod is, shared by the pods of a node.
type placement struct {
	node  string
	phase corev1.PodPhase
}

// extra is the rest of the spec and status, when there is any: the images
// of a gated pod, the PodScheduled condition of an unbound one.
type extra struct {
	spec   *corev1.PodSpec
	status *corev1.PodStatus
}

var shapes = newTable[shape]()

// Compact returns the cached form of pod, which it takes over: pod must not
// be used afterwards.
func Compact(pod *corev1.Pod) *Pod {
	p := &Pod{ObjectMeta: pod.ObjectMeta}
	p.Annotations = p.split(pod.Annotations, true)
	spec, status := pod.Spec, pod.Status
	key := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, GenerateName: p.GenerateName, Labels: p.Labels,
			Annotations: p.Annotations, OwnerReferences: p.OwnerReferences, Finalizers: p.Finalizers},
		Spec: corev1.PodSpec{NodeSelector: spec.NodeSelector, Affinity: spec.Affinity, Tolerations: spec.Tolerations,
			SchedulingGates: spec.SchedulingGates},
	}
	build := func() *shape {
		return &shape{namespace: p.Namespace, generateName: p.GenerateName, labels: p.Labels, annotations: p.Annotations,
			owners: p.OwnerReferences, finalizers: p.Finalizers, nodeSelector: spec.NodeSelector, affinity: spec.Affinity,
			tolerations: spec.Tolerations, gates: spec.SchedulingGates}
	}
	if b, err := key.Marshal(); err == nil {
		p.shape = shapes.get(b, build)
	} else {
		p.shape = build() // not shared, still correct
	}
	s := p.shape
	p.Namespace, p.GenerateName, p.Labels, p.Annotations = s.namespace, s.generateName, s.labels, s.annotations
	p.OwnerReferences, p.Finalizers = s.owners, s.finalizers
	p.where = unique.Make(placement{node: spec.NodeName, phase: status.Phase})

	spec.NodeName, spec.NodeSelector, spec.Affinity, spec.Tolerations, spec.SchedulingGates = "", nil, nil, nil, nil
	status.Phase = ""
	var x extra
	if !reflect.ValueOf(spec).IsZero() {
		x.spec = &spec
	}
	if !reflect.ValueOf(status).IsZero() {
		x.status = &status
	}
	if x.spec != nil || x.status != nil {
		p.extra = &x
	}
	return p
}

// split keeps the per-pod annotations of a in p.own and returns the others;
// a itself is changed only when inPlace.
func (p *Pod) split(a map[string]string, inPlace bool) map[string]string {
	p.own = [len(perPodKeys)]string{}
	for i, k := range perPodKeys {
		v := a[k]
		if v == "" || (i == shadowSlot && strings.HasPrefix(v, "{")) {
			continue // an empty value stays in the shared part: kept as it is
		}
		if !inPlace {
			a, inPlace = maps.Clone(a), true
		}
		delete(a, k)
		p.own[i] = v
	}
	if v := a[annotations.Shadow]; p.own[shadowSlot] == "" && strings.HasPrefix(v, "{") {
		if !inPlace {
			a = maps.Clone(a)
		}
		delete(a, annotations.Shadow)
		p.own[shadowSlot] = v
	}
	return a
}

// Gates gives the scheduling gates of a cached object (a *Pod or a
// *corev1.Pod) without building a view: what the predicates of the
// controllers that follow gated pods read on every pod event. They must not
// be changed.
func Gates(obj any) ([]corev1.PodSchedulingGate, bool) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return o.Spec.SchedulingGates, true
	case *Pod:
		return o.shape.gates, true
	}
	return nil, false
}

// HasAnnotation reports whether a cached object (a *Pod, or any
// metav1.Object) carries the annotation key, without building its
// annotations: what the predicates read on every pod event.
func HasAnnotation(obj any, key string) bool {
	switch o := obj.(type) {
	case *Pod:
		for i := range perPodKeys {
			if o.own[i] != "" && o.slotKey(i) == key {
				return true
			}
		}
		_, ok := o.Annotations[key]
		return ok
	case metav1.Object:
		_, ok := o.GetAnnotations()[key]
		return ok
	}
	return false
}

// View gives a cached object (a *Pod, or a *corev1.Pod as fakes and tests
// hold) as a *corev1.Pod to read: it shares the cached pod's maps and slices,
// so it must not be changed. Anything else gives false.
func View(obj any) (*corev1.Pod, bool) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return o, true
	case *Pod:
		v := &corev1.Pod{}
		o.fill(v)
		return v, true
	}
	return nil, false
}

func (p *Pod) fill(v *corev1.Pod) {
	if p.extra != nil && p.extra.spec != nil {
		v.Spec = *p.extra.spec
	}
	if p.extra != nil && p.extra.status != nil {
		v.Status = *p.extra.status
	}
	v.ObjectMeta = p.ObjectMeta
	v.Annotations = p.GetAnnotations()
	w := p.where.Value()
	v.Spec.NodeName, v.Status.Phase = w.node, w.phase
	s := p.shape
	v.Spec.NodeSelector, v.Spec.Affinity, v.Spec.Tolerations, v.Spec.SchedulingGates = s.nodeSelector, s.affinity, s.tolerations, s.gates
}

// DeepCopyObject gives the full pod, sharing nothing with the cache: what
// controller-runtime's cache reader hands out for a Get or a List.
func (p *Pod) DeepCopyObject() runtime.Object {
	var v corev1.Pod
	p.fill(&v)
	return v.DeepCopy()
}

// GetObjectKind: a cached pod carries no kind; the cache reader sets it on
// the copies it hands out.
func (p *Pod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// GetObjectMeta is the pod itself, so that its annotations are read whole.
func (p *Pod) GetObjectMeta() metav1.Object { return p }

// GetAnnotations gives all the pod's annotations: the shared ones and the
// per-pod ones, in a new map when there are per-pod ones.
func (p *Pod) GetAnnotations() map[string]string {
	if p.own == ([len(perPodKeys)]string{}) {
		return p.Annotations
	}
	out := make(map[string]string, len(p.Annotations)+len(perPodKeys))
	maps.Copy(out, p.Annotations)
	for i := range perPodKeys {
		if p.own[i] != "" {
			out[p.slotKey(i)] = p.own[i]
		}
	}
	return out
}

// SetAnnotations replaces the pod's annotations (a is not changed).
func (p *Pod) SetAnnotations(a map[string]string) {
	p.Annotations = p.split(a, false)
}
