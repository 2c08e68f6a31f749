package profiles

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

const vm corev1.ResourceName = "kata.peerpods.io/vm"

var kata = Profile{RuntimeClassName: "kata-remote", Resource: vm, Quantity: resource.MustParse("1"), KeepRequests: true}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []Profile
		err  string // substrings, "|"-separated
	}{
		{raw: "", want: nil},
		{raw: "  ", want: nil},
		{raw: "null", want: nil},
		{raw: "[]", want: []Profile{}},
		{raw: `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","quantity":"1","keepRequests":true}]`, want: []Profile{kata}},
		{raw: `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","quantity":2,"keepRequests":false},
			{"runtimeClassName":"kata-qemu-remote","resource":"example.com/vm"}]`, want: []Profile{
			{RuntimeClassName: "kata-remote", Resource: vm, Quantity: resource.MustParse("2")},
			{RuntimeClassName: "kata-qemu-remote", Resource: "example.com/vm", Quantity: resource.MustParse("1"), KeepRequests: true},
		}},
		{raw: `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","vmSizing":true}]`, want: []Profile{
			{RuntimeClassName: "kata-remote", Resource: vm, Quantity: resource.MustParse("1"), KeepRequests: true, VMSizing: true},
		}},
		{raw: `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","vmSizing":false}]`, want: []Profile{kata}},
		{raw: `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","vmSizing":"yes"}]`, err: "vmSizing"},
		{raw: `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","vmSizing":1}]`, err: "vmSizing"},
		{raw: `[{"runtimeClassName":"a","resource":"nvidia.com/gpu","vmSizing":true}]`, err: `entry 1 (runtimeClassName "a"): resource "nvidia.com/gpu" cannot count the VMs with vmSizing`},
		{raw: `{"runtimeClassName":"kata-remote"}`, err: "want a JSON list"},
		{raw: `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","keepRequest":true}]`, err: `unknown field "keepRequest"`},
		{raw: `[] []`, err: "found more after it"},
		{raw: `[{"resource":"kata.peerpods.io/vm"}]`, err: "entry 1: runtimeClassName is required"},
		{raw: `[{"runtimeClassName":"Kata_Remote","resource":"kata.peerpods.io/vm"}]`, err: `entry 1 (runtimeClassName "Kata_Remote"): runtimeClassName "Kata_Remote" is not a RuntimeClass name`},
		{raw: `[{"runtimeClassName":"a","resource":"cpu"}]`, err: `entry 1 (runtimeClassName "a"): resource "cpu" is not an extended resource: it needs a domain`},
		{raw: `[{"runtimeClassName":"a","resource":"memory"}]`, err: `resource "memory" is not an extended resource`},
		{raw: `[{"runtimeClassName":"a"}]`, err: "resource is required"},
		{raw: `[{"runtimeClassName":"a","resource":"kubernetes.io/vm"}]`, err: "the kubernetes.io domain is Kubernetes' own"},
		{raw: `[{"runtimeClassName":"a","resource":"node.kubernetes.io/vm"}]`, err: "the kubernetes.io domain is Kubernetes' own"},
		{raw: `[{"runtimeClassName":"a","resource":"requests.example.com/vm"}]`, err: `the prefix "requests." is reserved`},
		{raw: `[{"runtimeClassName":"a","resource":"example.com/v m"}]`, err: `resource "example.com/v m" is not a valid extended resource name`},
		{raw: `[{"runtimeClassName":"a","resource":"example.com/vm","quantity":"0"}]`, err: `quantity "0" must be positive`},
		{raw: `[{"runtimeClassName":"a","resource":"example.com/vm","quantity":-1}]`, err: `quantity "-1" must be positive`},
		{raw: `[{"runtimeClassName":"a","resource":"example.com/vm","quantity":"500m"}]`, err: `quantity "500m" must be a whole number`},
		{raw: `[{"runtimeClassName":"a","resource":"example.com/vm","quantity":"lots"}]`, err: `quantity "lots"`},
		{raw: `[{"runtimeClassName":"a","resource":"example.com/vm"},{"runtimeClassName":"b","resource":"example.com/vm"},{"runtimeClassName":"a","resource":"example.com/other"}]`,
			err: `entry 3 (runtimeClassName "a"): runtimeClassName is already profiled by entry 1`},
		{raw: `[{"runtimeClassName":"a","resource":"cpu","quantity":"0"},{"resource":"example.com/vm"}]`,
			err: `entry 1 (runtimeClassName "a"): resource "cpu"|entry 1 (runtimeClassName "a"): quantity "0"|entry 2: runtimeClassName is required`},
	} {
		got, err := Parse(tc.raw)
		if tc.err != "" {
			if err == nil {
				t.Errorf("Parse(%s) = %v, want an error with %q", tc.raw, got, tc.err)
				continue
			}
			for _, want := range strings.Split(tc.err, "|") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Parse(%s) error %q does not contain %q", tc.raw, err, want)
				}
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%s): %v", tc.raw, err)
			continue
		}
		if len(got) != len(tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("Parse(%s) = %+v, want %+v", tc.raw, got, tc.want)
			continue
		}
		for i := range got {
			g, w := got[i], tc.want[i]
			if g.RuntimeClassName != w.RuntimeClassName || g.Resource != w.Resource || g.Quantity.Cmp(w.Quantity) != 0 || g.KeepRequests != w.KeepRequests || g.VMSizing != w.VMSizing {
				t.Errorf("Parse(%s)[%d] = %+v, want %+v", tc.raw, i, g, w)
			}
		}
	}
}

// rl builds a ResourceList from "name=quantity" pairs.
func rl(pairs ...string) corev1.ResourceList {
	if len(pairs) == 0 {
		return nil
	}
	out := corev1.ResourceList{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return out
}

func res(requests, limits []string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: rl(requests...), Limits: rl(limits...)}
}

func ctr(name string, r corev1.ResourceRequirements) corev1.Container {
	return corev1.Container{Name: name, Image: "busybox", Resources: r}
}

func kataPod(containers []corev1.Container, initContainers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "web"},
		Spec:       corev1.PodSpec{RuntimeClassName: ptr.To("kata-remote"), Containers: containers, InitContainers: initContainers},
	}
}

// apply applies ops to the JSON of pod the way the API server does (RFC
// 6902 add and remove on object members, through arrays by index), failing
// on a path that does not exist.
func apply(t *testing.T, pod *corev1.Pod, ops []jsonpatch.JsonPatchOperation) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if err := applyOp(doc, op); err != nil {
			t.Fatalf("applying %s %s: %v", op.Operation, op.Path, err)
		}
	}
	raw, err = json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func applyOp(doc any, op jsonpatch.JsonPatchOperation) error {
	tokens := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
	for i, tok := range tokens {
		tokens[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
	}
	parent := doc
	for _, tok := range tokens[:len(tokens)-1] {
		switch p := parent.(type) {
		case map[string]any:
			next, ok := p[tok]
			if !ok {
				return fmt.Errorf("no member %q", tok)
			}
			parent = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(p) {
				return fmt.Errorf("no index %q", tok)
			}
			parent = p[i]
		default:
			return fmt.Errorf("%q: not a container", tok)
		}
	}
	obj, ok := parent.(map[string]any)
	if !ok {
		return fmt.Errorf("parent of %s is not an object", op.Path)
	}
	last := tokens[len(tokens)-1]
	switch op.Operation {
	case "add":
		raw, err := json.Marshal(op.Value)
		if err != nil {
			return err
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		obj[last] = v
	case "remove":
		if _, ok := obj[last]; !ok {
			return fmt.Errorf("no member %q to remove", last)
		}
		delete(obj, last)
	default:
		return fmt.Errorf("unexpected operation %q", op.Operation)
	}
	return nil
}

func patched(t *testing.T, pod *corev1.Pod, p Profile) (*corev1.Pod, []jsonpatch.JsonPatchOperation) {
	t.Helper()
	ops, err := Patch(pod, p)
	if err != nil {
		t.Fatal(err)
	}
	return apply(t, pod, ops), ops
}

func equalList(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

func checkRes(t *testing.T, what string, got, want corev1.ResourceRequirements) {
	t.Helper()
	if !equalList(got.Requests, want.Requests) || !equalList(got.Limits, want.Limits) {
		t.Errorf("%s resources = requests %v limits %v, want requests %v limits %v", what, got.Requests, got.Limits, want.Requests, want.Limits)
	}
}

func record(t *testing.T, pod *corev1.Pod) Record {
	t.Helper()
	raw, ok := pod.Annotations[annotations.OriginalResources]
	if !ok {
		t.Fatalf("no %s annotation: %v", annotations.OriginalResources, pod.Annotations)
	}
	r, err := ParseRecord(raw)
	if err != nil {
		t.Fatalf("annotation %q: %v", raw, err)
	}
	return r
}

func checkRemoved(t *testing.T, what string, got Removed, ok bool, want Removed) {
	t.Helper()
	if want.empty() {
		if ok {
			t.Errorf("%s recorded %+v, want nothing", what, got)
		}
		return
	}
	if !ok || !equalList(got.Requests, want.Requests) || !equalList(got.Limits, want.Limits) {
		t.Errorf("%s recorded %+v (present %v), want %+v", what, got, ok, want)
	}
}

var vmOnly = res([]string{"kata.peerpods.io/vm=1"}, []string{"kata.peerpods.io/vm=1"})

func TestPatch(t *testing.T) {
	sidecar := ctr("proxy", res([]string{"cpu=100m", "memory=64Mi"}, []string{"memory=64Mi"}))
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		// want: resources of containers then init containers.
		want     []corev1.ResourceRequirements
		removed  map[string]Removed // by container name, init containers prefixed "init:"
		noChange bool
	}{
		{
			name: "one container with requests and limits (the peer-pods webhook's hack/pod.yaml)",
			pod:  kataPod([]corev1.Container{ctr("nginx", res([]string{"cpu=1", "memory=1Gi"}, []string{"cpu=1", "memory=2Gi"}))}),
			want: []corev1.ResourceRequirements{vmOnly},
			removed: map[string]Removed{"nginx": {
				Requests: rl("cpu=1", "memory=1Gi"), Limits: rl("cpu=1", "memory=2Gi")}},
		},
		{
			name: "several containers: only the first gets the extended resource",
			pod: kataPod([]corev1.Container{
				ctr("app", res([]string{"cpu=500m"}, []string{"cpu=1"})),
				ctr("log", res([]string{"cpu=100m", "memory=128Mi"}, []string{"memory=128Mi"})),
				ctr("idle", corev1.ResourceRequirements{}),
			}),
			want: []corev1.ResourceRequirements{vmOnly, {}, {}},
			removed: map[string]Removed{
				"app": {Requests: rl("cpu=500m"), Limits: rl("cpu=1")},
				"log": {Requests: rl("cpu=100m", "memory=128Mi"), Limits: rl("memory=128Mi")},
			},
		},
		{
			name: "init containers and a sidecar (restartPolicy Always) lose theirs too",
			pod: kataPod([]corev1.Container{ctr("app", res([]string{"memory=1Gi"}, []string{"memory=1Gi"}))},
				ctr("migrate", res([]string{"cpu=2", "memory=2Gi"}, []string{"cpu=2", "memory=2Gi"})), sidecar),
			want: []corev1.ResourceRequirements{vmOnly, {}, {}},
			removed: map[string]Removed{
				"app":          {Requests: rl("memory=1Gi"), Limits: rl("memory=1Gi")},
				"init:migrate": {Requests: rl("cpu=2", "memory=2Gi"), Limits: rl("cpu=2", "memory=2Gi")},
				"init:proxy":   {Requests: rl("cpu=100m", "memory=64Mi"), Limits: rl("memory=64Mi")},
			},
		},
		{
			name:    "limits only",
			pod:     kataPod([]corev1.Container{ctr("app", res(nil, []string{"cpu=2", "memory=1Gi"}))}),
			want:    []corev1.ResourceRequirements{vmOnly},
			removed: map[string]Removed{"app": {Limits: rl("cpu=2", "memory=1Gi")}},
		},
		{
			name:    "requests only",
			pod:     kataPod([]corev1.Container{ctr("app", res([]string{"cpu=250m", "memory=256Mi"}, nil))}),
			want:    []corev1.ResourceRequirements{vmOnly},
			removed: map[string]Removed{"app": {Requests: rl("cpu=250m", "memory=256Mi")}},
		},
		{
			name: "no resources at all: the extended resource, nothing recorded",
			pod:  kataPod([]corev1.Container{ctr("app", corev1.ResourceRequirements{}), ctr("b", corev1.ResourceRequirements{})}),
			want: []corev1.ResourceRequirements{vmOnly, {}},
		},
		{
			name: "other resources and claims stay",
			pod: kataPod([]corev1.Container{ctr("app", corev1.ResourceRequirements{
				Requests: rl("cpu=1", "ephemeral-storage=1Gi", "example.com/dongle=1"), Limits: rl("example.com/dongle=1"),
				Claims: []corev1.ResourceClaim{{Name: "gpu"}}})}),
			want: []corev1.ResourceRequirements{{
				Requests: rl("kata.peerpods.io/vm=1", "ephemeral-storage=1Gi", "example.com/dongle=1"),
				Limits:   rl("kata.peerpods.io/vm=1", "example.com/dongle=1")}},
			removed: map[string]Removed{"app": {Requests: rl("cpu=1")}},
		},
		{
			name: "extended resource already on the first container, with cpu",
			pod:  kataPod([]corev1.Container{ctr("app", res([]string{"cpu=1", "kata.peerpods.io/vm=1"}, []string{"kata.peerpods.io/vm=1"}))}),
			want: []corev1.ResourceRequirements{vmOnly},
			// The extended resource was already right: not a removal.
			removed: map[string]Removed{"app": {Requests: rl("cpu=1")}},
		},
		{
			name:     "extended resource already on the first container, nothing else: unchanged",
			pod:      kataPod([]corev1.Container{ctr("app", vmOnly), ctr("b", corev1.ResourceRequirements{})}),
			want:     []corev1.ResourceRequirements{vmOnly, {}},
			noChange: true,
		},
		{
			name: "extended resource at another quantity or on another container: the profile's, on the first only",
			pod: kataPod([]corev1.Container{
				ctr("app", res([]string{"kata.peerpods.io/vm=3"}, []string{"kata.peerpods.io/vm=3"})),
				ctr("b", res([]string{"kata.peerpods.io/vm=1"}, []string{"kata.peerpods.io/vm=1"})),
			}),
			want: []corev1.ResourceRequirements{vmOnly, {}},
			removed: map[string]Removed{
				"app": {Requests: rl("kata.peerpods.io/vm=3"), Limits: rl("kata.peerpods.io/vm=3")},
				"b":   {Requests: rl("kata.peerpods.io/vm=1"), Limits: rl("kata.peerpods.io/vm=1")},
			},
		},
		{
			name: "extended resource only as a request: the limit is added",
			pod:  kataPod([]corev1.Container{ctr("app", res([]string{"kata.peerpods.io/vm=1"}, nil))}),
			want: []corev1.ResourceRequirements{vmOnly},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ops := patched(t, tc.pod, kata)
			if tc.noChange {
				if len(ops) != 0 {
					t.Fatalf("ops = %+v, want none", ops)
				}
				return
			}
			if len(ops) == 0 {
				t.Fatal("no operation")
			}
			all := append(append([]corev1.Container(nil), got.Spec.Containers...), got.Spec.InitContainers...)
			if len(all) != len(tc.want) {
				t.Fatalf("%d containers, want %d", len(all), len(tc.want))
			}
			for i, c := range all {
				checkRes(t, c.Name, c.Resources, tc.want[i])
			}
			if !reflect.DeepEqual(got.Spec.Containers[0].Resources.Claims, tc.pod.Spec.Containers[0].Resources.Claims) {
				t.Errorf("claims = %v, want %v", got.Spec.Containers[0].Resources.Claims, tc.pod.Spec.Containers[0].Resources.Claims)
			}
			if len(tc.removed) == 0 {
				if v, ok := got.Annotations[annotations.OriginalResources]; ok {
					t.Errorf("nothing removed, but recorded %s", v)
				}
			} else {
				rec := record(t, got)
				for _, c := range tc.pod.Spec.Containers {
					r, ok := rec.Containers[c.Name]
					checkRemoved(t, c.Name, r, ok, tc.removed[c.Name])
				}
				for _, c := range tc.pod.Spec.InitContainers {
					r, ok := rec.InitContainers[c.Name]
					checkRemoved(t, "init container "+c.Name, r, ok, tc.removed["init:"+c.Name])
				}
			}
			// Reinvocation: the rewritten pod gets no operation.
			if again, err := Patch(got, kata); err != nil || len(again) != 0 {
				t.Errorf("rewritten pod patched again: %+v, %v", again, err)
			}
			// Nothing else changed.
			tc.pod.Spec.Containers, tc.pod.Spec.InitContainers = nil, nil
			got.Spec.Containers, got.Spec.InitContainers = nil, nil
			delete(got.Annotations, annotations.OriginalResources)
			if len(got.Annotations) == 0 {
				got.Annotations = nil
			}
			if !reflect.DeepEqual(got, tc.pod) {
				t.Errorf("pod changed beyond resources and the annotation:\n got %+v\nwant %+v", got, tc.pod)
			}
		})
	}
}

func TestPatchOtherRuntimeClass(t *testing.T) {
	for _, rc := range []*string{nil, ptr.To("runc"), ptr.To("kata-remote-x")} {
		pod := kataPod([]corev1.Container{ctr("app", res([]string{"cpu=1"}, []string{"cpu=1"}))})
		pod.Spec.RuntimeClassName = rc
		if ops, err := Patch(pod, kata); err != nil || ops != nil {
			t.Errorf("runtimeClassName %v: ops %+v, err %v; want none", rc, ops, err)
		}
	}
}

func TestPatchKeepRequestsOff(t *testing.T) {
	p := kata
	p.KeepRequests = false
	p.Quantity = resource.MustParse("2")
	pod := kataPod([]corev1.Container{ctr("app", res([]string{"cpu=1"}, []string{"cpu=1"}))})
	got, _ := patched(t, pod, p)
	if _, ok := got.Annotations[annotations.OriginalResources]; ok {
		t.Errorf("keepRequests false, yet annotated: %v", got.Annotations)
	}
	checkRes(t, "app", got.Spec.Containers[0].Resources, res([]string{"kata.peerpods.io/vm=2"}, []string{"kata.peerpods.io/vm=2"}))
	if ops, _ := Patch(got, p); len(ops) != 0 {
		t.Errorf("rewritten pod patched again: %+v", ops)
	}
}

// TestPatchAnnotations: the record goes into existing annotations (the
// key's "/" escaped), and a record already there (a reinvocation after
// another webhook added resources) keeps its values and gains the new ones.
func TestPatchAnnotations(t *testing.T) {
	pod := kataPod([]corev1.Container{ctr("app", res([]string{"cpu=1"}, nil))})
	pod.Annotations = map[string]string{"team": "a"}
	got, ops := patched(t, pod, kata)
	if last := ops[len(ops)-1]; last.Path != "/metadata/annotations/apportion.dev~1original-resources" {
		t.Errorf("annotation path %q", last.Path)
	}
	if got.Annotations["team"] != "a" {
		t.Errorf("annotations = %v", got.Annotations)
	}
	if s := got.Annotations[annotations.OriginalResources]; s != `{"containers":{"app":{"requests":{"cpu":"1"}}}}` {
		t.Errorf("record = %s", s)
	}

	// Another webhook adds memory to the rewritten pod, and cpu again.
	got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
	got.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
	again, _ := patched(t, got, kata)
	checkRes(t, "app", again.Spec.Containers[0].Resources, vmOnly)
	rec := record(t, again)
	checkRemoved(t, "app", rec.Containers["app"], true, Removed{Requests: rl("cpu=1", "memory=1Gi")})

	// An annotation that does not parse is replaced.
	pod = kataPod([]corev1.Container{ctr("app", res([]string{"cpu=1"}, nil))})
	pod.Annotations = map[string]string{annotations.OriginalResources: "{not json"}
	got, _ = patched(t, pod, kata)
	checkRemoved(t, "app", record(t, got).Containers["app"], true, Removed{Requests: rl("cpu=1")})
}

func TestPatchPodLevelResources(t *testing.T) {
	pod := kataPod([]corev1.Container{ctr("app", res([]string{"cpu=1"}, nil))})
	pod.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("cpu=2", "memory=2Gi"), Limits: rl("memory=2Gi")}
	got, _ := patched(t, pod, kata)
	if got.Spec.Resources != nil {
		t.Errorf("spec.resources = %+v, want none", got.Spec.Resources)
	}
	rec := record(t, got)
	if rec.Pod == nil {
		t.Fatal("pod-level resources not recorded")
	}
	checkRemoved(t, "pod", *rec.Pod, true, Removed{Requests: rl("cpu=2", "memory=2Gi"), Limits: rl("memory=2Gi")})

	pod.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("memory=1Gi", "hugepages-2Mi=4Mi"), Limits: rl("hugepages-2Mi=4Mi")}
	got, _ = patched(t, pod, kata)
	if got.Spec.Resources == nil || !equalList(got.Spec.Resources.Requests, rl("hugepages-2Mi=4Mi")) {
		t.Errorf("spec.resources = %+v, want hugepages only", got.Spec.Resources)
	}
}

func TestPatchNoContainers(t *testing.T) {
	if ops, err := Patch(kataPod(nil), kata); err != nil || ops != nil {
		t.Errorf("ops %+v, err %v", ops, err)
	}
}
