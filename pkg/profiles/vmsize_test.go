package profiles

import (
	"maps"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

var kataSized = func() Profile { p := kata; p.VMSizing = true; return p }()

// TestPatchVMSizing: with vmSizing the rewrite adds Kata's sizing
// annotations, summed over containers and init containers, limits over
// requests, rounded up; values the user set stay; without it, none.
func TestPatchVMSizing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		off     bool              // the profile without vmSizing
		userAnn map[string]string // annotations the pod is created with
		want    map[string]string // the Kata annotations after the rewrite
	}{
		{
			name: "the peer-pods webhook's hack/pod.yaml: limits over requests",
			pod:  kataPod([]corev1.Container{ctr("nginx", res([]string{"cpu=1", "memory=1Gi"}, []string{"cpu=1", "memory=2Gi"}))}),
			want: map[string]string{KataVCPUs: "1", KataMemory: "2048"},
		},
		{
			name: "containers summed, each its limit when set, else its request",
			pod: kataPod([]corev1.Container{
				ctr("app", res([]string{"cpu=500m", "memory=256Mi"}, []string{"cpu=2"})),
				ctr("log", res([]string{"cpu=250m", "memory=128Mi"}, []string{"memory=512Mi"})),
				ctr("idle", corev1.ResourceRequirements{}),
			}),
			// cpu 2 + 250m = 2250m -> 3; memory 256Mi + 512Mi.
			want: map[string]string{KataVCPUs: "3", KataMemory: "768"},
		},
		{
			name: "rounded up: fractional cpu to a whole vCPU, bytes to a whole MiB",
			pod:  kataPod([]corev1.Container{ctr("app", res([]string{"cpu=100m", "memory=1000M"}, nil))}),
			// 1000M = 953.67 MiB.
			want: map[string]string{KataVCPUs: "1", KataMemory: "954"},
		},
		{
			name: "init containers and sidecars are added to the containers, as the peer-pods webhook does",
			pod: kataPod([]corev1.Container{ctr("app", res([]string{"cpu=1", "memory=1Gi"}, nil))},
				ctr("migrate", res([]string{"cpu=2", "memory=2Gi"}, []string{"cpu=3"})),
				ctr("proxy", res([]string{"cpu=100m", "memory=64Mi"}, nil))),
			// cpu 1 + 3 + 100m -> 5; memory 1Gi + 2Gi + 64Mi.
			want: map[string]string{KataVCPUs: "5", KataMemory: "3136"},
		},
		{
			name: "GPUs summed into default_gpus",
			pod: kataPod([]corev1.Container{
				ctr("train", res([]string{"cpu=4", "memory=16Gi", "nvidia.com/gpu=2"}, []string{"nvidia.com/gpu=2"})),
				ctr("eval", res(nil, []string{"nvidia.com/gpu=1"})),
			}),
			want: map[string]string{KataVCPUs: "4", KataMemory: "16384", KataGPUs: "3"},
		},
		{
			name: "memory only: no vCPU annotation",
			pod:  kataPod([]corev1.Container{ctr("app", res([]string{"memory=512Mi"}, nil))}),
			want: map[string]string{KataMemory: "512"},
		},
		{
			name:    "values the user set are kept, the others written",
			pod:     kataPod([]corev1.Container{ctr("app", res([]string{"cpu=2", "memory=4Gi", "nvidia.com/gpu=1"}, nil))}),
			userAnn: map[string]string{KataVCPUs: "8", KataGPUs: "0", "team": "a"},
			want:    map[string]string{KataVCPUs: "8", KataMemory: "4096", KataGPUs: "0"},
		},
		{
			name:    "every value set by the user: all kept",
			pod:     kataPod([]corev1.Container{ctr("app", res([]string{"cpu=2", "memory=4Gi"}, nil))}),
			userAnn: map[string]string{KataVCPUs: "1", KataMemory: "2048"},
			want:    map[string]string{KataVCPUs: "1", KataMemory: "2048"},
		},
		{
			name: "the pod's spec.resources is the pod's size for cpu and memory",
			pod: func() *corev1.Pod {
				p := kataPod([]corev1.Container{ctr("app", res([]string{"cpu=1", "memory=1Gi", "nvidia.com/gpu=1"}, nil))})
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("cpu=2"), Limits: rl("cpu=3")}
				return p
			}(),
			want: map[string]string{KataVCPUs: "3", KataMemory: "1024", KataGPUs: "1"},
		},
		{
			name: "option off: no annotation",
			pod:  kataPod([]corev1.Container{ctr("app", res([]string{"cpu=1", "memory=1Gi", "nvidia.com/gpu=1"}, nil))}),
			off:  true,
			want: map[string]string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := kataSized
			if tc.off {
				p = kata
			}
			tc.pod.Annotations = maps.Clone(tc.userAnn)
			got, _ := patched(t, tc.pod, p)
			kataAnn := map[string]string{}
			for _, k := range []string{KataVCPUs, KataMemory, KataGPUs} {
				if v, ok := got.Annotations[k]; ok {
					kataAnn[k] = v
				}
			}
			if !maps.Equal(kataAnn, tc.want) {
				t.Errorf("Kata annotations = %v, want %v", kataAnn, tc.want)
			}
			if tc.userAnn["team"] != "" && got.Annotations["team"] != tc.userAnn["team"] {
				t.Errorf("the user's other annotations lost: %v", got.Annotations)
			}
			if _, ok := got.Annotations[annotations.OriginalResources]; !ok {
				t.Errorf("no record next to the sizing: %v", got.Annotations)
			}
			// The GPUs move into the VM's size with vmSizing, and stay
			// on the containers without.
			gpus := false
			for _, c := range append(got.Spec.Containers, got.Spec.InitContainers...) {
				_, req := c.Resources.Requests[GPU]
				_, lim := c.Resources.Limits[GPU]
				gpus = gpus || req || lim
			}
			_, asked := tc.pod.Spec.Containers[0].Resources.Requests[GPU]
			if wantGPUs := asked && tc.off; gpus != wantGPUs {
				t.Errorf("nvidia.com/gpu left on the containers: %t, want %t", gpus, wantGPUs)
			}
			// A reinvocation changes nothing.
			if ops, err := Patch(got, p); err != nil || len(ops) != 0 {
				t.Errorf("rewritten pod patched again: %+v, %v", ops, err)
			}
		})
	}
}

// TestPatchVMSizingRecordsGPUs: the removed GPUs are recorded with the cpu
// and memory.
func TestPatchVMSizingRecordsGPUs(t *testing.T) {
	pod := kataPod([]corev1.Container{ctr("train", res([]string{"cpu=1", "nvidia.com/gpu=1"}, []string{"nvidia.com/gpu=1"}))})
	got, _ := patched(t, pod, kataSized)
	checkRemoved(t, "train", record(t, got).Containers["train"], true,
		Removed{Requests: rl("cpu=1", "nvidia.com/gpu=1"), Limits: rl("nvidia.com/gpu=1")})
}

// FuzzVMSize: on pods of whole-unit resources (fuzzPod: cpu in cores,
// memory in bytes, under 1 MiB), the sizing annotations Patch adds are the
// sums counted here in plain integers, and the user's annotations stay.
func FuzzVMSize(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 0, 1, 3, 0, 0})
	f.Add([]byte{4, 1, 0, 1, 0, 0, 0, 1, 1, 2, 2, 0, 3, 0, 0, 0, 0})
	f.Add([]byte{200, 0, 0, 1, 5, 0, 0, 1, 5, 9, 9, 9, 9})
	f.Add([]byte{131, 5, 6, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 3, 0})
	f.Fuzz(func(t *testing.T, spec []byte) {
		pod := fuzzPod(spec)
		pod.Annotations = map[string]string{"team": "web"}
		want := map[string]string{}
		sum := func(name corev1.ResourceName) int64 {
			var n int64
			each := func(r corev1.ResourceRequirements) {
				if q, ok := r.Limits[name]; ok {
					n += q.Value()
				} else if q, ok := r.Requests[name]; ok {
					n += q.Value()
				}
			}
			for _, c := range append(append([]corev1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...) {
				each(c.Resources)
			}
			if r := pod.Spec.Resources; r != nil {
				_, l := r.Limits[name]
				_, q := r.Requests[name]
				if l || q {
					n = 0
					each(*r)
				}
			}
			return n
		}
		if n := sum(corev1.ResourceCPU); n > 0 {
			want[KataVCPUs] = strconv.FormatInt(n, 10)
		}
		if sum(corev1.ResourceMemory) > 0 {
			want[KataMemory] = "1" // under 1 MiB, rounded up
		}
		got, _ := patched(t, pod, kataSized)
		kataAnn := map[string]string{}
		for _, k := range []string{KataVCPUs, KataMemory, KataGPUs} {
			if v, ok := got.Annotations[k]; ok {
				kataAnn[k] = v
			}
		}
		if !maps.Equal(kataAnn, want) {
			t.Fatalf("Kata annotations = %v, want %v", kataAnn, want)
		}
		if got.Annotations["team"] != "web" {
			t.Fatalf("annotations %v: the user's is gone", got.Annotations)
		}
	})
}
