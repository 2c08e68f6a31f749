package profiles

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Kata's VM sizing annotations, which the remote hypervisor (the
// confidential-containers cloud-api-adaptor) reads to choose the peer pod's
// VM, and the GPU resource VMSize counts.
const (
	// KataVCPUs is the VM's vCPUs, a whole number.
	KataVCPUs = "io.katacontainers.config.hypervisor.default_vcpus"
	// KataMemory is the VM's memory in MiB.
	KataMemory = "io.katacontainers.config.hypervisor.default_memory"
	// KataGPUs is the VM's GPUs (the remote hypervisor's instance
	// selection only).
	KataGPUs = "io.katacontainers.config.hypervisor.default_gpus"
	// GPU is the NVIDIA device plugin's resource, counted into KataGPUs.
	GPU corev1.ResourceName = "nvidia.com/gpu"
)

const mib = 1 << 20

// VMSize returns Kata's sizing annotations for pod as it was created
// (before the rewrite), the way the peer-pods webhook sizes the VM:
//   - each container and init container counts its limit when set, else its
//     request, for cpu, memory and nvidia.com/gpu;
//   - init containers are added to the containers, not compared with them:
//     the peer-pods webhook sums them too, so a pod asks for the same VM as
//     under it (at worst a larger VM than the init containers, which run one
//     at a time, need);
//   - the pod's spec.resources, when it sets cpu or memory (limit, else
//     request), is the pod's size for that resource, as Kubernetes takes it;
//   - cpu is rounded up to whole vCPUs (KataVCPUs), memory up to whole MiB
//     (KataMemory), GPUs are KataGPUs.
//
// A resource that sums to zero gets no annotation.
func VMSize(pod *corev1.Pod) map[string]string {
	total := map[corev1.ResourceName]*resource.Quantity{}
	count := func(res corev1.ResourceRequirements, names ...corev1.ResourceName) {
		for _, name := range names {
			q, ok := res.Limits[name]
			if !ok {
				q, ok = res.Requests[name]
			}
			if !ok {
				continue
			}
			if total[name] == nil {
				total[name] = &resource.Quantity{}
			}
			total[name].Add(q)
		}
	}
	for _, c := range pod.Spec.Containers {
		count(c.Resources, corev1.ResourceCPU, corev1.ResourceMemory, GPU)
	}
	for _, c := range pod.Spec.InitContainers {
		count(c.Resources, corev1.ResourceCPU, corev1.ResourceMemory, GPU)
	}
	if pod.Spec.Resources != nil {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			_, limit := pod.Spec.Resources.Limits[name]
			_, request := pod.Spec.Resources.Requests[name]
			if limit || request {
				delete(total, name)
				count(*pod.Spec.Resources, name)
			}
		}
	}
	out := map[string]string{}
	set := func(key string, n int64) {
		if n > 0 {
			out[key] = strconv.FormatInt(n, 10)
		}
	}
	if q := total[corev1.ResourceCPU]; q != nil {
		set(KataVCPUs, q.Value()) // Value rounds up: 1500m is 2
	}
	if q := total[corev1.ResourceMemory]; q != nil {
		if b := q.Value(); b > 0 {
			set(KataMemory, b/mib+min(b%mib, 1))
		}
	}
	if q := total[GPU]; q != nil {
		set(KataGPUs, q.Value())
	}
	return out
}
