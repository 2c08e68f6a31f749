package profiles

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// fuzzResources are the names a fuzzed container may hold: the two the
// rewrite removes, the profile's own and one it must leave alone.
var fuzzResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, vm, "example.com/gpu"}

// fuzzList reads one resource list from spec: a byte per name in
// fuzzResources, 0 mod 4 for absent, else that many units.
func fuzzList(spec *[]byte, names []corev1.ResourceName) corev1.ResourceList {
	var out corev1.ResourceList
	for _, name := range names {
		var b byte
		if len(*spec) > 0 {
			b, *spec = (*spec)[0], (*spec)[1:]
		}
		if b%4 == 0 {
			continue
		}
		if out == nil {
			out = corev1.ResourceList{}
		}
		out[name] = *resource.NewQuantity(int64(b), resource.DecimalSI)
	}
	return out
}

// fuzzPod reads a kata pod from spec: 1 to 3 containers and 0 to 2 init
// containers, each with requests and limits, and optional pod-level cpu and
// memory.
func fuzzPod(spec []byte) *corev1.Pod {
	var shape byte
	if len(spec) > 0 {
		shape, spec = spec[0], spec[1:]
	}
	read := func(name string) corev1.Container {
		return ctr(name, corev1.ResourceRequirements{Requests: fuzzList(&spec, fuzzResources), Limits: fuzzList(&spec, fuzzResources)})
	}
	var containers, inits []corev1.Container
	for i := range int(shape%3) + 1 {
		containers = append(containers, read(fmt.Sprintf("c%d", i)))
	}
	for i := range int(shape/3) % 3 {
		inits = append(inits, read(fmt.Sprintf("i%d", i)))
	}
	pod := kataPod(containers, inits...)
	if shape >= 128 {
		cm := fuzzResources[:2]
		pod.Spec.Resources = &corev1.ResourceRequirements{Requests: fuzzList(&spec, cm), Limits: fuzzList(&spec, cm)}
	}
	return pod
}

// wantRemoved is what the rewrite must take out of in: cpu, memory and the
// profile's resource, except that resource on the first container when it
// already holds the profile's quantity.
func wantRemoved(in corev1.ResourceRequirements, first bool, q resource.Quantity) Removed {
	take := func(list corev1.ResourceList) corev1.ResourceList {
		out := corev1.ResourceList{}
		for name, v := range list {
			if name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == vm && (!first || v.Cmp(q) != 0) {
				out[name] = v
			}
		}
		return out
	}
	return Removed{Requests: take(in.Requests), Limits: take(in.Limits)}
}

// FuzzPatch checks the rewrite the Patch doc promises on any kata pod: it
// does not fail; afterwards no container, init container or spec.resources
// holds cpu or memory, the first container alone holds the profile's
// resource at its quantity, other resources and annotations are kept; with
// KeepRequests the record holds exactly what was removed (none when nothing
// was); the rewritten pod gets no further operation; and a pod of another
// runtime class gets none at all.
func FuzzPatch(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 0, 1, 3, 0, 0}, uint8(1), true)
	f.Add([]byte{4, 1, 0, 1, 0, 0, 0, 1, 1, 2, 2, 0, 3, 0, 0, 0, 0}, uint8(2), true)
	f.Add([]byte{200, 0, 0, 1, 5, 0, 0, 1, 5, 9, 9, 9, 9}, uint8(1), false)
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(3), true)
	f.Fuzz(func(t *testing.T, spec []byte, quantity uint8, keep bool) {
		p := kata
		p.Quantity = *resource.NewQuantity(int64(quantity%4)+1, resource.DecimalSI)
		p.KeepRequests = keep
		pod := fuzzPod(spec)
		pod.Annotations = map[string]string{"team": "web"}

		other := pod.DeepCopy()
		other.Spec.RuntimeClassName = ptr.To("runc")
		if ops, err := Patch(other, p); err != nil || ops != nil {
			t.Fatalf("another runtime class: ops %+v, err %v; want none", ops, err)
		}

		got, _ := patched(t, pod, p)
		want := Record{Containers: map[string]Removed{}, InitContainers: map[string]Removed{}}
		check := func(what string, before, after corev1.ResourceRequirements, first bool, into map[string]Removed, name string) {
			t.Helper()
			for _, name := range fuzzResources {
				b, inReq := before.Requests[name]
				a, outReq := after.Requests[name]
				switch {
				case name == vm && first:
					l, inLim := after.Limits[vm]
					if !outReq || a.Cmp(p.Quantity) != 0 || !inLim || l.Cmp(p.Quantity) != 0 {
						t.Fatalf("%s: %v is not the profile's %s", what, after, &p.Quantity)
					}
				case name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == vm:
					if _, inLimits := after.Limits[name]; outReq || inLimits {
						t.Fatalf("%s still holds %s: %v", what, name, after)
					}
				default:
					bl, inLim := before.Limits[name]
					al, outLim := after.Limits[name]
					if inReq != outReq || b.Cmp(a) != 0 || inLim != outLim || bl.Cmp(al) != 0 {
						t.Fatalf("%s: %s changed from %v to %v", what, name, before, after)
					}
				}
			}
			if r := wantRemoved(before, first, p.Quantity); !r.empty() {
				into[name] = r
			}
		}
		for i, c := range pod.Spec.Containers {
			check("container "+c.Name, c.Resources, got.Spec.Containers[i].Resources, i == 0, want.Containers, c.Name)
		}
		for i, c := range pod.Spec.InitContainers {
			check("init container "+c.Name, c.Resources, got.Spec.InitContainers[i].Resources, false, want.InitContainers, c.Name)
		}
		if pod.Spec.Resources != nil {
			after := corev1.ResourceRequirements{}
			if got.Spec.Resources != nil {
				after = *got.Spec.Resources
			}
			pods := map[string]Removed{}
			check("spec.resources", *pod.Spec.Resources, after, false, pods, "pod")
			if r, ok := pods["pod"]; ok {
				want.Pod = &r
			}
		}
		if got.Annotations["team"] != "web" {
			t.Fatalf("annotations %v: the user's is gone", got.Annotations)
		}
		checkRecord(t, got, keep, want)

		if ops, err := Patch(got, p); err != nil || len(ops) != 0 {
			t.Fatalf("the rewritten pod is patched again: %+v, %v", ops, err)
		}
	})
}

func checkRecord(t *testing.T, got *corev1.Pod, keep bool, want Record) {
	t.Helper()
	_, annotated := got.Annotations[annotations.OriginalResources]
	if !keep || want.Pod == nil && len(want.Containers) == 0 && len(want.InitContainers) == 0 {
		if annotated {
			t.Fatalf("recorded %s with nothing to record (keepRequests %v)", got.Annotations[annotations.OriginalResources], keep)
		}
		return
	}
	rec := record(t, got)
	if (rec.Pod == nil) != (want.Pod == nil) || len(rec.Containers) != len(want.Containers) || len(rec.InitContainers) != len(want.InitContainers) {
		t.Fatalf("record %+v, want %+v", rec, want)
	}
	if want.Pod != nil {
		checkRemoved(t, "pod", *rec.Pod, true, *want.Pod)
	}
	for name, w := range want.Containers {
		r, ok := rec.Containers[name]
		checkRemoved(t, "container "+name, r, ok, w)
	}
	for name, w := range want.InitContainers {
		r, ok := rec.InitContainers[name]
		checkRemoved(t, "init container "+name, r, ok, w)
	}
}
