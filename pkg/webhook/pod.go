// Package webhook holds apportion's admission webhooks and what they read:
//   - PodMutator (PodMutatorPath) holds in-scope pods with the placement
//     scheduling gate, removes decision annotations a client wrote, applies
//     runtime-class profiles, and warns on the workload (InvalidStrategy,
//     InvalidAnnotation Events);
//   - WorkloadValidator (WorkloadValidatorPath) rejects invalid strategies on
//     workloads at apply time;
//   - PolicyValidator (PolicyValidatorPath) does the same for
//     PlacementPolicies;
//   - LeaseLiveness tells the pod mutator whether a placement leader is alive.
//
// All fail open: any error admits the object unchanged, counted and logged.
package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/jellydator/ttlcache/v3"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	k8sevents "k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/profiles"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// PodMutatorPath is where the pod mutator is served (controller-runtime's
// generated path for core/v1 pods).
const PodMutatorPath = "/mutate--v1-pod"

// Admission results, the values of the result label.
const (
	ResultGated    = "gated"
	ResultSkipped  = "skipped"
	ResultInvalid  = "invalid"
	ResultNoLeader = "no_leader"
	ResultError    = "error"
	// ResultShadow: a pod in shadow mode, admitted without the gate; the
	// placement leader records what it would have done.
	ResultShadow = "shadow"
)

// Liveness tells whether a placement leader can take gated pods.
type Liveness interface {
	Alive(ctx context.Context) bool
}

// PodMutator decides, at a pod's creation, what apportion adds to it: the
// placement gate for pods whose workload carries a valid strategy (or, with
// --architectures, pods placed by architecture alone), the runtime-class
// profile's resources, and the removal of decision annotations a client
// wrote. Excluded namespaces, mirror pods, pods with a nodeName, DaemonSet
// pods and apportion.dev/skip pods are never gated, and neither are pods in
// shadow mode (apportion.dev/mode: shadow, or the default mode): the
// placement leader decides them without holding or changing them.
type PodMutator struct {
	// Reader is the informer cache (metadata of workloads, Leases).
	Reader   client.Reader
	Leader   Liveness
	Recorder k8sevents.EventRecorder
	// Excluded namespaces are never touched.
	Excluded sets.Set[string]
	// Architectures is --architectures: which pods without a strategy are
	// held for placement by architecture (options.Architectures*; empty
	// means off).
	Architectures string
	// Profiles are the runtime-class profiles by runtimeClassName
	// (--runtime-class-profiles): pods of those classes get their cpu and
	// memory replaced by the profile's extended resource in the admission
	// patch, with or without a placement gate.
	Profiles map[string]profiles.Profile
	// Policies, when set, gives a strategy to workloads that carry none in
	// their annotations (PlacementPolicies).
	Policies workload.PolicySource
	// DefaultMode is --default-mode, the mode of workloads that name none
	// (annotations.Mode*; empty: required).
	DefaultMode string

	once   sync.Once
	parsed *ttlcache.Cache[string, error] // raw strategy -> parse error (nil: valid)
	check  func(raw string) error         // parse, made once: a method value per pod is an allocation
	events *events.Recorder               // Recorder, with the InvalidAnnotation dedupe
}

// parseCacheSize bounds the remembered strategies: one per distinct
// strategy text in the cluster, far fewer than pods.
const parseCacheSize = 4096

func (m *PodMutator) init() {
	m.once.Do(func() {
		m.parsed = ttlcache.New(ttlcache.WithCapacity[string, error](parseCacheSize), ttlcache.WithTTL[string, error](time.Hour))
		m.check = m.parse
		m.events = events.NewRecorder(m.Recorder)
	})
}

// warnInterval is how often the same workload is warned about the same
// annotations.
const warnInterval = 10 * time.Minute

// warnAnnotations records a Warning Event InvalidAnnotation on the workload
// naming its out-of-range apportion.dev/* annotations, at most once per
// warnInterval for the same problems. The webhook is the one place that
// reports them (besides the workload validator's warnings at apply time):
// it sees every pod's template annotations, which the placement leader's
// pod cache does not keep.
func (m *PodMutator) warnAnnotations(info *workload.Info) {
	m.init()
	msg := workload.DescribeProblems(info.Problems)
	m.events.Publish(events.Event{Regarding: info.Workload.ObjectReference(), Type: corev1.EventTypeWarning, Reason: workload.ReasonInvalidAnnotation, Action: "Admit",
		Message: msg, DedupeValues: []string{string(info.Workload.UID), msg}, DedupeTimeout: warnInterval})
}

// parse validates a strategy, remembering the verdict: the same text arrives
// with every pod of a workload.
func (m *PodMutator) parse(raw string) error {
	m.init()
	if item := m.parsed.Get(raw); item != nil {
		return item.Value()
	}
	_, err := strategy.Parse(raw)
	m.parsed.Set(raw, err, ttlcache.DefaultTTL)
	return err
}

var _ admission.Handler = &PodMutator{}

// admissionPod is the part of a pod the mutator reads. Decoding only this
// keeps admission in the microseconds: containers, volumes and status are
// skipped. The whole pod is decoded only when its runtimeClassName has a
// profile.
type admissionPod struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		NodeName         string                     `json:"nodeName,omitempty"`
		SchedulingGates  []corev1.PodSchedulingGate `json:"schedulingGates,omitempty"`
		RuntimeClassName *string                    `json:"runtimeClassName,omitempty"`
	} `json:"spec"`
}

// Handle implements admission.Handler.
func (m *PodMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	defer func() { metrics.AdmissionSeconds.Observe(time.Since(start).Seconds()) }()
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var in admissionPod
	if err := json.Unmarshal(req.Object.Raw, &in); err != nil {
		metrics.AdmissionTotal.WithLabelValues(ResultError).Inc()
		log.FromContext(ctx).Error(err, "decoding pod, admitting it unchanged", "namespace", req.Namespace)
		return admission.Allowed("")
	}
	ops, err := m.profileOps(req.Namespace, &in, req.Object.Raw)
	if err != nil {
		metrics.AdmissionTotal.WithLabelValues(ResultError).Inc()
		log.FromContext(ctx).Error(err, "applying the runtime-class profile, admitting the pod unchanged",
			"namespace", req.Namespace, "name", in.Metadata.Name, "generateName", in.Metadata.GenerateName, "runtimeClassName", *in.Spec.RuntimeClassName)
		return admission.Allowed("")
	}
	strip, removed := m.stripDecision(req.Namespace, &in)
	ops = append(strip, ops...)
	pod := &corev1.Pod{ObjectMeta: in.Metadata, Spec: corev1.PodSpec{NodeName: in.Spec.NodeName, SchedulingGates: in.Spec.SchedulingGates}}
	hadGates := len(pod.Spec.SchedulingGates) > 0
	// The profile's rewrite stands whatever placement says (skipped, no
	// leader, invalid strategy, or an error resolving the workload): it is
	// what lets the pod run on its runtime class at all, and it cannot be
	// made later.
	result, warnings := m.Mutate(ctx, req.Namespace, pod)
	metrics.AdmissionTotal.WithLabelValues(result).Inc()
	if len(removed) > 0 {
		metrics.DecisionAnnotationsRemovedTotal.Inc()
		log.FromContext(ctx).V(1).Info("removed decision annotations a client wrote", "namespace", req.Namespace, "name", in.Metadata.Name, "generateName", in.Metadata.GenerateName, "keys", removed)
		warnings = append(warnings, "apportion: removed "+strings.Join(removed, ", ")+": only apportion writes its decisions")
	}
	if result == ResultGated {
		gate := corev1.PodSchedulingGate{Name: annotations.PlacementGate}
		op := jsonpatch.JsonPatchOperation{Operation: "add", Path: "/spec/schedulingGates", Value: []corev1.PodSchedulingGate{gate}}
		if hadGates {
			op = jsonpatch.JsonPatchOperation{Operation: "add", Path: "/spec/schedulingGates/-", Value: gate}
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return admission.Allowed("").WithWarnings(warnings...)
	}
	return admission.Patched("", ops...).WithWarnings(warnings...)
}

// stripDecision removes the decision annotations (annotations.DecisionKeys)
// from the pod being created. No pod is created with a decision: whatever a
// client wrote under these keys (a copied manifest, a tenant steering the
// split or the capacity fallback) is removed, so no controller, metric or
// deletion cost takes it for one. It edits in and returns the patch and the
// keys removed; excluded namespaces and mirror pods, which apportion never
// touches, keep theirs.
func (m *PodMutator) stripDecision(namespace string, in *admissionPod) ([]jsonpatch.JsonPatchOperation, []string) {
	if len(in.Metadata.Annotations) == 0 || m.Excluded.Has(namespace) || in.Metadata.Annotations[corev1.MirrorPodAnnotationKey] != "" {
		return nil, nil
	}
	var ops []jsonpatch.JsonPatchOperation
	var removed []string
	for _, k := range annotations.DecisionKeys {
		if _, ok := in.Metadata.Annotations[k]; ok {
			ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "remove", Path: annotations.PatchPath(k)})
			removed = append(removed, k)
			delete(in.Metadata.Annotations, k)
		}
	}
	return ops, removed
}

// profileOps returns the runtime-class profile's patch for the pod, decoding
// it whole only when its runtimeClassName has a profile. Every pod of the
// class is rewritten, whoever creates it (a pod with nodeName, a DaemonSet's,
// an opted-out or already placed one): only excluded namespaces and mirror
// pods are never touched. A pod rewritten already (reinvocation) gets no
// operation.
func (m *PodMutator) profileOps(namespace string, in *admissionPod, raw []byte) ([]jsonpatch.JsonPatchOperation, error) {
	if in.Spec.RuntimeClassName == nil || len(m.Profiles) == 0 {
		return nil, nil
	}
	profile, ok := m.Profiles[*in.Spec.RuntimeClassName]
	if !ok || m.Excluded.Has(namespace) || in.Metadata.Annotations[corev1.MirrorPodAnnotationKey] != "" {
		return nil, nil
	}
	full := &corev1.Pod{}
	if err := json.Unmarshal(raw, full); err != nil {
		return nil, err
	}
	return profiles.Patch(full, profile)
}

// Mutate decides whether the pod is held for placement and, if so, adds the
// gate to it. namespace is the request's (the pod's may still be empty). It
// returns the admission result and any warnings for the user. What happens
// to the pod is workload.Classify's answer; what is the webhook's is here:
// excluded namespaces, the Events and warnings, the leader's liveness.
func (m *PodMutator) Mutate(ctx context.Context, namespace string, pod *corev1.Pod) (string, []string) {
	if m.Excluded.Has(namespace) {
		return ResultSkipped, nil
	}
	m.init()
	opts := [...]workload.Option{
		workload.WithDefaultMode(m.DefaultMode),
		workload.WithPolicies(m.Policies),
		workload.WithArchitectures(architecturePlacement(m.Architectures)),
		workload.WithStrategyCheck(m.check),
	}
	c := workload.Classify(ctx, m.Reader, namespace, pod, opts[:]...)
	if len(c.Problems) > 0 {
		m.warnAnnotations(c.Info)
	}
	switch c.Verdict {
	case workload.Skip:
		return ResultSkipped, nil
	case workload.Failed:
		log.FromContext(ctx).Error(c.Err, "resolving the pod's workload, admitting it unchanged", "namespace", namespace)
		return ResultError, nil
	case workload.Invalid:
		if c.Info == nil {
			// The pod template's strategy, its owner not cached yet.
			return ResultInvalid, []string{"apportion: " + c.Invalid.Error() + "; the pod is placed without apportion"}
		}
		// Not deduplicated here: client-go folds the repeats on one
		// workload into one Event series.
		m.events.Eventf(c.Info.Workload.ObjectReference(), nil, corev1.EventTypeWarning, "InvalidStrategy", "Admit", "%s: %v; pods are placed without apportion", c.Info.Source, c.Invalid)
		return ResultInvalid, []string{"apportion: " + c.Info.Source.String() + ": " + c.Invalid.Error() + "; the pod is placed without apportion"}
	case workload.Shadow:
		return ResultShadow, nil
	}
	return m.gate(ctx, pod)
}

// gate holds the pod for the placement leader, if there is one alive.
func (m *PodMutator) gate(ctx context.Context, pod *corev1.Pod) (string, []string) {
	if !m.Leader.Alive(ctx) {
		return ResultNoLeader, nil
	}
	pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: annotations.PlacementGate})
	return ResultGated, nil
}

// architecturePlacement is --architectures as workload.Classify takes it:
// which pods without a strategy are placed by architecture alone.
func architecturePlacement(flag string) workload.ArchitecturePlacement {
	switch flag {
	case options.ArchitecturesAll:
		return workload.ArchitectureAlways
	case options.ArchitecturesOptIn:
		return workload.ArchitectureOptIn
	}
	return workload.ArchitectureNever
}
