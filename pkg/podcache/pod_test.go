package podcache

import (
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"testing"
	"weak"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// replica is the i-th pod of ReplicaSet rs in group, as decoded: nothing
// shared with the other replicas.
func replica(rs, group string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("%s-%d", rs, i), UID: types.UID(fmt.Sprintf("%s-%d", rs, i)),
			Labels:          map[string]string{"app": rs},
			Annotations:     map[string]string{annotations.Group: group, annotations.Signature: fmt.Sprintf("sig-%d", i), corev1.PodDeletionCost: fmt.Sprint(-i)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID(rs), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%2),
			Tolerations: []corev1.Toleration{{Key: group, Operator: corev1.TolerationOpExists}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func same[T any](a, b T) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestReplicasShareTheirShape: the pods of a revision and group share labels,
// owner references, annotations and scheduling fields; another group has
// its own; each keeps its own signature and deletion cost.
func TestReplicasShareTheirShape(t *testing.T) {
	a, b := Compact(replica("rs1", "spot", 1)), Compact(replica("rs1", "spot", 2))
	other := Compact(replica("rs1", "on-demand", 3))
	if !same(a.Labels, b.Labels) || !same(a.OwnerReferences, b.OwnerReferences) || !same(a.Annotations, b.Annotations) || a.shape != b.shape {
		t.Errorf("replicas of one group share nothing")
	}
	if a.shape == other.shape || !same(a.Labels, a.shape.labels) {
		t.Errorf("another group shares the shape: %v", other.shape == a.shape)
	}
	va, _ := View(a)
	vb, _ := View(b)
	if va.Annotations[annotations.Signature] != "sig-1" || vb.Annotations[annotations.Signature] != "sig-2" ||
		va.Annotations[corev1.PodDeletionCost] != "-1" || vb.Annotations[corev1.PodDeletionCost] != "-2" ||
		va.Annotations[annotations.Group] != "spot" || va.Spec.NodeName != "node-1" || vb.Spec.NodeName != "node-0" ||
		va.Status.Phase != corev1.PodRunning || va.Spec.Tolerations[0].Key != "spot" {
		t.Errorf("views: %+v\n%+v", va, vb)
	}
	if _, ok := a.Annotations[annotations.Signature]; ok {
		t.Errorf("the shared annotations hold a signature: %v", a.Annotations)
	}
}

// TestShadowPodsShareTheirShape: pods decided in shadow mode, each with its
// own apportion.dev/shadow value, still share their revision's shape; each
// keeps its own shadow decision.
func TestShadowPodsShareTheirShape(t *testing.T) {
	shadow := func(i int) *corev1.Pod {
		p := replica("rs1", "", i)
		p.Annotations = map[string]string{annotations.Shadow: fmt.Sprintf(`{"group":"spot","signature":"sig-%d"}`, i)}
		p.Spec.Tolerations = nil
		return p
	}
	a, b := Compact(shadow(1)), Compact(shadow(2))
	if a.shape != b.shape {
		t.Errorf("shadow pods of one revision share no shape")
	}
	if !HasAnnotation(a, annotations.Shadow) || HasAnnotation(a, annotations.Signature) || !HasAnnotation(shadow(3), annotations.Shadow) ||
		!HasAnnotation(Compact(replica("rs1", "spot", 4)), annotations.Group) || HasAnnotation(Compact(replica("rs1", "spot", 5)), annotations.Shadow) {
		t.Errorf("HasAnnotation")
	}
	va, _ := View(a)
	vb, _ := View(b)
	if va.Annotations[annotations.Shadow] != `{"group":"spot","signature":"sig-1"}` || vb.Annotations[annotations.Shadow] != `{"group":"spot","signature":"sig-2"}` {
		t.Errorf("views: %v %v", va.Annotations, vb.Annotations)
	}
	if _, ok := va.Annotations[annotations.Signature]; ok || len(va.Annotations) != 1 {
		t.Errorf("view of a shadow pod: %v", va.Annotations)
	}
}

// TestAmbiguousSlotValuesStayShared: the signature's slot holds a shadow
// decision only when the two cannot be confused; any other combination is
// kept whole, in the shared annotations.
func TestAmbiguousSlotValuesStayShared(t *testing.T) {
	for name, ann := range map[string]map[string]string{
		"signature like JSON":      {annotations.Signature: "{forged"},
		"shadow not JSON":          {annotations.Shadow: "spot"},
		"signature and shadow":     {annotations.Signature: "sig", annotations.Shadow: `{"group":"a"}`},
		"signature alone":          {annotations.Signature: "sig", annotations.Group: "a"},
		"shadow and deletion cost": {annotations.Shadow: `{"group":"a"}`, corev1.PodDeletionCost: "-3"},
	} {
		p := replica("rs1", "", 1)
		p.Annotations = ann
		want := maps.Clone(ann)
		c := Compact(p)
		v, _ := View(c)
		if !maps.Equal(v.Annotations, want) || !maps.Equal(c.GetAnnotations(), want) {
			t.Errorf("%s: view %v, GetAnnotations %v, want %v", name, v.Annotations, c.GetAnnotations(), want)
		}
		for k := range want {
			if !HasAnnotation(c, k) {
				t.Errorf("%s: HasAnnotation(%s) false", name, k)
			}
		}
		for _, k := range []string{annotations.Signature, annotations.Shadow, corev1.PodDeletionCost} {
			if _, ok := want[k]; !ok && HasAnnotation(c, k) {
				t.Errorf("%s: HasAnnotation(%s) true", name, k)
			}
		}
	}
}

// TestAccessorsSeeEverything: what reads a cached pod as a metav1.Object
// (predicates, the store's key function, label selectors) sees all its
// annotations; SetAnnotations leaves its argument alone.
func TestAccessorsSeeEverything(t *testing.T) {
	p := Compact(replica("rs1", "spot", 1))
	m, err := apimeta.Accessor(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.GetAnnotations(); len(got) != 3 || got[annotations.Signature] != "sig-1" {
		t.Errorf("GetAnnotations = %v", got)
	}
	if got := p.GetObjectMeta().GetAnnotations(); len(got) != 3 {
		t.Errorf("GetObjectMeta().GetAnnotations = %v", got)
	}
	in := map[string]string{annotations.Signature: "s", "a": "b"}
	p.SetAnnotations(in)
	if len(in) != 2 || len(p.Annotations) != 1 || p.GetAnnotations()[annotations.Signature] != "s" {
		t.Errorf("SetAnnotations: argument %v, shared %v, all %v", in, p.Annotations, p.GetAnnotations())
	}
	var _ client.Object = p
}

// TestCacheReaderReadsFullPods does what controller-runtime's cache reader
// does with a stored object: a Get deep-copies it and assigns the copy to
// the caller's *corev1.Pod, a List puts the copies in a PodList. A List
// without the copy (UnsafeDisableDeepCopy) cannot: pod lists must copy.
func TestCacheReaderReadsFullPods(t *testing.T) {
	stored := Compact(replica("rs1", "spot", 1))
	want, _ := View(stored)

	out := &corev1.Pod{}
	obj := stored.DeepCopyObject()
	if !reflect.TypeOf(obj).AssignableTo(reflect.TypeOf(out)) {
		t.Fatalf("a Get would fail: the copy is a %T", obj)
	}
	reflect.Indirect(reflect.ValueOf(out)).Set(reflect.Indirect(reflect.ValueOf(obj)))
	if !reflect.DeepEqual(out, want) {
		t.Errorf("Get = %+v, want %+v", out, want)
	}

	var list corev1.PodList
	if err := apimeta.SetList(&list, []kruntime.Object{stored.DeepCopyObject()}); err != nil || len(list.Items) != 1 || list.Items[0].Name != want.Name {
		t.Errorf("List = %+v, %v", list.Items, err)
	}
	if err := apimeta.SetList(&list, []kruntime.Object{stored}); err == nil {
		t.Errorf("a PodList took the stored object itself")
	}
}

// TestSharedPartsGoWithTheirPods: once no cached pod uses a shape, the
// table lets go of it (the pods of old ReplicaSets do not pile up).
func TestSharedPartsGoWithTheirPods(t *testing.T) {
	// The table's entries for this test's shapes, counted by their weak
	// pointers (equal for one object): other tests' shapes may come and go
	// meanwhile, so the table's size proves nothing.
	ours := map[weak.Pointer[shape]]bool{}
	interned := func() int {
		shapes.mu.Lock()
		defer shapes.mu.Unlock()
		n := 0
		for _, wp := range shapes.m {
			if ours[wp] {
				n++
			}
		}
		return n
	}
	func() {
		pods := make([]*Pod, 100)
		for i := range pods {
			pods[i] = Compact(replica(fmt.Sprintf("gone-%d", i), "spot", i))
			ours[weak.Make(pods[i].shape)] = true
		}
		if len(ours) != 100 || interned() != 100 {
			t.Fatalf("%d shapes, %d interned, for 100 ReplicaSets", len(ours), interned())
		}
		// The pods live until here: without this, a collection during
		// the count may take them (their last use is in the loop) and
		// their shapes' cleanups drop entries before they are counted.
		runtime.KeepAlive(pods)
	}()
	// Cleanups run after a collection, on their own goroutine.
	for i := 0; i < 100 && interned() > 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if got := interned(); got > 0 {
		t.Errorf("%d shapes still interned after their pods went", got)
	}
}

// BenchmarkView is what a predicate or event handler pays to read a cached
// pod; BenchmarkDeepCopyObject what a Get or a List item from the cache
// costs.
func BenchmarkView(b *testing.B) {
	p := Compact(replica("rs1", "spot", 1))
	b.ReportAllocs()
	for b.Loop() {
		if v, _ := View(p); v.Name == "" {
			b.Fatal("no name")
		}
	}
}

func BenchmarkDeepCopyObject(b *testing.B) {
	p := Compact(replica("rs1", "spot", 1))
	b.ReportAllocs()
	for b.Loop() {
		if p.DeepCopyObject() == nil {
			b.Fatal("no copy")
		}
	}
}

// TestGatesWithoutAView: the gates of a cached pod, as the gated-pod
// predicates read them, are the pod's own, for a cached *Pod and a
// *corev1.Pod alike.
func TestGatesWithoutAView(t *testing.T) {
	gated := replica("rs1", "spot", 1)
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/other"}, {Name: annotations.PlacementGate}}
	for name, obj := range map[string]any{"cached": Compact(gated.DeepCopy()), "typed": gated, "ungated": Compact(replica("rs1", "spot", 2))} {
		gates, ok := Gates(obj)
		want := gated.Spec.SchedulingGates
		if name == "ungated" {
			want = nil
		}
		if !ok || !reflect.DeepEqual(gates, want) {
			t.Errorf("%s: gates %v (%v), want %v", name, gates, ok, want)
		}
	}
	if _, ok := Gates(&corev1.Node{}); ok {
		t.Error("a node has gates")
	}
}

// TestOwnerKeyInPlace: the revision a cached pod counts under is read from
// the cached object itself (the deletion-cost index does so on every pod
// event), and is the pod's own.
func TestOwnerKeyInPlace(t *testing.T) {
	pod := replica("rs1", "spot", 1)
	want := workload.OwnerKey(pod)
	if want == "" {
		t.Fatal("the fixture has no owner key")
	}
	if got := workload.OwnerKey(Compact(pod.DeepCopy())); got != want {
		t.Errorf("owner key of the cached pod %q, want %q", got, want)
	}
}

// TestControllerIndexInPlace: the pod index by controller reads the owner
// of the cached object itself.
func TestControllerIndexInPlace(t *testing.T) {
	pod := replica("rs1", "spot", 1)
	if got := ControllerIndex(Compact(pod.DeepCopy())); len(got) != 1 || got[0] != "rs1" {
		t.Errorf("index of the cached pod %q, want [rs1]", got)
	}
	pod.OwnerReferences = nil
	if got := ControllerIndex(Compact(pod)); got != nil {
		t.Errorf("index of a pod without a controller %q, want none", got)
	}
}
