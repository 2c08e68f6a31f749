// Package profiles holds runtime-class profiles: for pods of a configured
// runtimeClassName (peer pods, whose containers run in a VM outside the
// node), the containers' cpu and memory requests and limits are replaced by
// one extended resource that counts the VMs, as the confidential-containers
// peer-pods webhook does. The rewrite happens in the admission patch itself:
// a pod's resources cannot change after it is created.
//
// Parse reads the profiles of --runtime-class-profiles; Patch is the
// rewrite, which records what it removed (Record, ParseRecord) when a
// profile keeps the requests, and writes Kata's VM sizing annotations
// (VMSize) when a profile sizes the VM.
package profiles

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// Profile rewrites the resources of the pods of one runtime class.
type Profile struct {
	// RuntimeClassName selects the pods (spec.runtimeClassName).
	RuntimeClassName string
	// Resource is the extended resource the first container requests
	// instead, e.g. kata.peerpods.io/vm.
	Resource corev1.ResourceName
	// Quantity of Resource, as request and limit (a positive integer).
	Quantity resource.Quantity
	// KeepRequests records the removed requests and limits in the
	// annotation annotations.OriginalResources.
	KeepRequests bool
	// VMSizing writes Kata's VM sizing annotations (VMSize) from the
	// resources the rewrite removes, and removes nvidia.com/gpu as well: the
	// GPUs are the VM's, not the node's.
	VMSizing bool
}

// entry is one profile as the chart passes it (JSON).
type entry struct {
	RuntimeClassName string          `json:"runtimeClassName"`
	Resource         string          `json:"resource"`
	Quantity         json.RawMessage `json:"quantity"`
	KeepRequests     *bool           `json:"keepRequests"`
	VMSizing         bool            `json:"vmSizing"`
}

// Parse reads the profiles from their JSON list, e.g.
// [{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","quantity":"1","keepRequests":true,"vmSizing":false}].
// An empty string (or null, or []) is no profile. keepRequests defaults to
// true, vmSizing to false. Every fault is reported, each naming its entry.
func Parse(raw string) ([]Profile, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" || raw == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var entries []entry
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("want a JSON list of {runtimeClassName, resource, quantity, keepRequests, vmSizing}: %w", err)
	}
	if dec.More() {
		return nil, errors.New("want one JSON list, found more after it")
	}
	var errs []error
	out := make([]Profile, 0, len(entries))
	seen := make(map[string]int, len(entries))
	for i, e := range entries {
		name := fmt.Sprintf("entry %d", i+1)
		if e.RuntimeClassName != "" {
			name += fmt.Sprintf(" (runtimeClassName %q)", e.RuntimeClassName)
		}
		p, perrs := e.profile()
		for _, err := range perrs {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		if e.RuntimeClassName != "" {
			if first, dup := seen[e.RuntimeClassName]; dup {
				errs = append(errs, fmt.Errorf("%s: runtimeClassName is already profiled by entry %d", name, first))
			} else {
				seen[e.RuntimeClassName] = i + 1
			}
		}
		out = append(out, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func (e entry) profile() (Profile, []error) {
	var errs []error
	p := Profile{RuntimeClassName: e.RuntimeClassName, Resource: corev1.ResourceName(e.Resource), KeepRequests: e.KeepRequests == nil || *e.KeepRequests, VMSizing: e.VMSizing}
	if e.RuntimeClassName == "" {
		errs = append(errs, errors.New("runtimeClassName is required"))
	} else if problems := validation.IsDNS1123Subdomain(e.RuntimeClassName); len(problems) > 0 {
		errs = append(errs, fmt.Errorf("runtimeClassName %q is not a RuntimeClass name: %s", e.RuntimeClassName, strings.Join(problems, "; ")))
	}
	if err := CheckExtendedResource(p.Resource); err != nil {
		errs = append(errs, err)
	} else if p.VMSizing && p.Resource == GPU {
		errs = append(errs, fmt.Errorf("resource %q cannot count the VMs with vmSizing, which moves the GPUs into the annotation %s", GPU, KataGPUs))
	}
	q, err := parseQuantity(e.Quantity)
	if err != nil {
		errs = append(errs, err)
	}
	p.Quantity = q
	return p, errs
}

// parseQuantity reads the quantity, a string ("1") or a number (1), which
// must be a positive integer: the API server refuses fractional extended
// resources. Absent means 1, the peer-pods webhook's fixed value.
func parseQuantity(raw json.RawMessage) (resource.Quantity, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return resource.MustParse("1"), nil
	}
	text := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return resource.Quantity{}, fmt.Errorf("quantity %s: %w", raw, err)
		}
	}
	q, err := resource.ParseQuantity(strings.TrimSpace(text))
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("quantity %q: %w", text, err)
	}
	if q.Sign() <= 0 {
		return resource.Quantity{}, fmt.Errorf("quantity %q must be positive", text)
	}
	if q.MilliValue()%1000 != 0 {
		return resource.Quantity{}, fmt.Errorf("quantity %q must be a whole number (extended resources are counted in units)", text)
	}
	return q, nil
}

// CheckExtendedResource reports whether name can be a pod's extended
// resource: domain-qualified, outside the kubernetes.io domain (so never
// cpu, memory, ephemeral-storage or hugepages-*), not prefixed "requests.",
// and a qualified name once prefixed (the API server's own rules).
func CheckExtendedResource(name corev1.ResourceName) error {
	s := string(name)
	switch {
	case s == "":
		return errors.New("resource is required (an extended resource name such as kata.peerpods.io/vm)")
	case !strings.Contains(s, "/"):
		return fmt.Errorf("resource %q is not an extended resource: it needs a domain, such as kata.peerpods.io/vm (cpu, memory and the other unqualified names are Kubernetes' own)", s)
	case strings.Contains(s, corev1.ResourceDefaultNamespacePrefix):
		return fmt.Errorf("resource %q is not an extended resource: the kubernetes.io domain is Kubernetes' own", s)
	case strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix):
		return fmt.Errorf("resource %q is not an extended resource: the prefix %q is reserved for quotas", s, corev1.DefaultResourceRequestsPrefix)
	}
	if problems := validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix + s); len(problems) > 0 {
		return fmt.Errorf("resource %q is not a valid extended resource name: %s", s, strings.Join(problems, "; "))
	}
	return nil
}

// Removed is what the rewrite took out of one container (or the pod's
// spec.resources).
type Removed struct {
	Requests corev1.ResourceList `json:"requests,omitempty"`
	Limits   corev1.ResourceList `json:"limits,omitempty"`
}

func (r Removed) empty() bool { return len(r.Requests) == 0 && len(r.Limits) == 0 }

// Record is the value of annotations.OriginalResources: what was removed,
// by container and init container name (and Pod for spec.resources).
type Record struct {
	Pod            *Removed           `json:"pod,omitempty"`
	Containers     map[string]Removed `json:"containers,omitempty"`
	InitContainers map[string]Removed `json:"initContainers,omitempty"`
}

// ParseRecord reads annotations.OriginalResources.
func ParseRecord(s string) (Record, error) {
	var r Record
	err := json.Unmarshal([]byte(s), &r)
	return r, err
}

// merge adds what add records and r does not already hold: the first value
// recorded for a resource is the one the pod was created with.
func (r *Record) merge(add Record) {
	if add.Pod != nil {
		if r.Pod == nil {
			r.Pod = &Removed{}
		}
		*r.Pod = mergeRemoved(*r.Pod, *add.Pod)
	}
	mergeMap := func(dst *map[string]Removed, src map[string]Removed) {
		for name, rem := range src {
			if *dst == nil {
				*dst = map[string]Removed{}
			}
			(*dst)[name] = mergeRemoved((*dst)[name], rem)
		}
	}
	mergeMap(&r.Containers, add.Containers)
	mergeMap(&r.InitContainers, add.InitContainers)
}

func mergeRemoved(old, add Removed) Removed {
	fill := func(dst, src corev1.ResourceList) corev1.ResourceList {
		for k, v := range src {
			if _, ok := dst[k]; ok {
				continue
			}
			if dst == nil {
				dst = corev1.ResourceList{}
			}
			dst[k] = v
		}
		return dst
	}
	return Removed{Requests: fill(old.Requests, add.Requests), Limits: fill(old.Limits, add.Limits)}
}

// Matches reports whether the profile applies to the pod.
func (p Profile) Matches(pod *corev1.Pod) bool {
	return pod.Spec.RuntimeClassName != nil && *pod.Spec.RuntimeClassName == p.RuntimeClassName
}

// Patch returns the JSON patch that rewrites pod for profile p: cpu and
// memory requests and limits go from every container, init container
// (sidecars included) and the pod's spec.resources; the first container
// requests and limits p.Resource at p.Quantity, and no other container has
// p.Resource; with KeepRequests what was removed is recorded in
// annotations.OriginalResources (merged into an existing record); with
// VMSizing nvidia.com/gpu goes too and Kata's sizing annotations (VMSize)
// the pod does not carry already are added. Other resources, claims and
// spec.overhead (the RuntimeClass's) are left alone. A pod of another
// runtime class, or one already rewritten, gets no operation.
func Patch(pod *corev1.Pod, p Profile) ([]jsonpatch.JsonPatchOperation, error) {
	if !p.Matches(pod) || len(pod.Spec.Containers) == 0 {
		return nil, nil
	}
	var rec Record
	ops := p.containerOps(pod.Spec.Containers, "/spec/containers", true, &rec.Containers)
	ops = append(ops, p.containerOps(pod.Spec.InitContainers, "/spec/initContainers", false, &rec.InitContainers)...)
	if pod.Spec.Resources != nil {
		// Pod-level resources hold cpu and memory (and hugepages) only;
		// the extended resource stays on the first container.
		res, removed := p.strip(*pod.Spec.Resources)
		if !removed.empty() {
			rec.Pod = &removed
			if len(res.Requests) == 0 && len(res.Limits) == 0 && len(res.Claims) == 0 {
				ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "remove", Path: "/spec/resources"})
			} else {
				ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: "/spec/resources", Value: res})
			}
		}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	add := map[string]string{}
	if p.VMSizing {
		for k, v := range VMSize(pod) {
			if _, set := pod.Annotations[k]; !set {
				// The user's value stands, whatever the containers ask.
				add[k] = v
			}
		}
	}
	if p.KeepRequests && (rec.Pod != nil || rec.Containers != nil || rec.InitContainers != nil) {
		value, err := recordValue(pod, rec)
		if err != nil {
			return nil, err
		}
		add[annotations.OriginalResources] = value
	}
	return append(ops, annotationOps(pod, add)...), nil
}

// containerOps rewrites the resources of each of containers (at path in the
// pod), the extended resource going to the first one when first is set; what
// it removes goes into removed, by container name.
func (p Profile) containerOps(containers []corev1.Container, path string, first bool, removed *map[string]Removed) []jsonpatch.JsonPatchOperation {
	var ops []jsonpatch.JsonPatchOperation
	for i, c := range containers {
		res, rm, changed := p.rewrite(c.Resources, first && i == 0)
		if changed {
			ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: fmt.Sprintf("%s/%d/resources", path, i), Value: res})
		}
		if !rm.empty() {
			if *removed == nil {
				*removed = map[string]Removed{}
			}
			(*removed)[c.Name] = rm
		}
	}
	return ops
}

// recordValue is rec as the value of annotations.OriginalResources, merged
// into the record the pod carries already.
func recordValue(pod *corev1.Pod, rec Record) (string, error) {
	if old, ok := pod.Annotations[annotations.OriginalResources]; ok {
		// A record from an earlier rewrite (reinvocation after another
		// webhook added resources): keep what it says. One that does not
		// parse is replaced.
		if prev, err := ParseRecord(old); err == nil {
			prev.merge(rec)
			rec = prev
		}
	}
	value, err := json.Marshal(rec)
	if err != nil {
		return "", fmt.Errorf("recording the original resources: %w", err)
	}
	return string(value), nil
}

// annotationOps sets the annotations of add on pod, in key order: one
// operation for the whole map when the pod has no annotations, else one per
// key.
func annotationOps(pod *corev1.Pod, add map[string]string) []jsonpatch.JsonPatchOperation {
	if len(add) == 0 {
		return nil
	}
	if pod.Annotations == nil {
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/metadata/annotations", Value: add}}
	}
	ops := make([]jsonpatch.JsonPatchOperation, 0, len(add))
	for _, k := range slices.Sorted(maps.Keys(add)) {
		ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: annotations.PatchPath(k), Value: add[k]})
	}
	return ops
}

// rewrite returns a container's resources after the profile, what was
// removed, and whether anything changed.
func (p Profile) rewrite(in corev1.ResourceRequirements, first bool) (corev1.ResourceRequirements, Removed, bool) {
	out, removed := p.strip(in)
	if !first {
		// strip also removed p.Resource: it belongs on the first
		// container only.
		return out, removed, !removed.empty()
	}
	changed := false
	set := func(list corev1.ResourceList, orig corev1.ResourceList, dst *corev1.ResourceList) corev1.ResourceList {
		if q, ok := orig[p.Resource]; ok && q.Cmp(p.Quantity) == 0 {
			// Already what the profile asks: not a removal.
			delete(*dst, p.Resource)
		} else {
			changed = true
		}
		if list == nil {
			list = corev1.ResourceList{}
		}
		list[p.Resource] = p.Quantity.DeepCopy()
		return list
	}
	out.Requests = set(out.Requests, in.Requests, &removed.Requests)
	out.Limits = set(out.Limits, in.Limits, &removed.Limits)
	if len(removed.Requests) == 0 {
		removed.Requests = nil
	}
	if len(removed.Limits) == 0 {
		removed.Limits = nil
	}
	return out, removed, changed || !removed.empty()
}

// removes reports whether the rewrite takes name out of containers: cpu,
// memory, the profile's resource, and with VMSizing the GPUs.
func (p Profile) removes(name corev1.ResourceName) bool {
	return name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == p.Resource || (p.VMSizing && name == GPU)
}

// strip removes what the profile removes from requests and limits.
func (p Profile) strip(in corev1.ResourceRequirements) (corev1.ResourceRequirements, Removed) {
	var removed Removed
	out := corev1.ResourceRequirements{Claims: in.Claims}
	out.Requests, removed.Requests = p.split(in.Requests)
	out.Limits, removed.Limits = p.split(in.Limits)
	return out, removed
}

func (p Profile) split(list corev1.ResourceList) (kept, removed corev1.ResourceList) {
	for name, q := range list {
		if p.removes(name) {
			if removed == nil {
				removed = corev1.ResourceList{}
			}
			removed[name] = q
			continue
		}
		if kept == nil {
			kept = corev1.ResourceList{}
		}
		kept[name] = q
	}
	return kept, removed
}
