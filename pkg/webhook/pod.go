// Package webhook holds apportion's admission webhooks: the pod mutator that
// holds in-scope pods with the placement scheduling gate, and the workload
// validator that rejects invalid strategies at apply time. Both fail open:
// any error admits the object unchanged, counted and logged once.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
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
)

// MirrorPodAnnotation marks static pods mirrored by the kubelet.
const MirrorPodAnnotation = "kubernetes.io/config.mirror"

// Liveness tells whether a placement leader can take gated pods.
type Liveness interface {
	Alive(ctx context.Context) bool
}

// PodMutator gates pods whose workload carries a valid strategy.
type PodMutator struct {
	// Reader is the informer cache (metadata of workloads, Leases).
	Reader   client.Reader
	Leader   Liveness
	Recorder events.EventRecorder
	// Excluded namespaces are never touched.
	Excluded sets.Set[string]
	Decoder  admission.Decoder
}

var _ admission.Handler = &PodMutator{}

// Handle implements admission.Handler.
func (m *PodMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	defer func() { metrics.AdmissionSeconds.Observe(time.Since(start).Seconds()) }()
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	pod := &corev1.Pod{}
	if err := m.Decoder.Decode(req, pod); err != nil {
		metrics.AdmissionTotal.WithLabelValues(ResultError).Inc()
		log.FromContext(ctx).Error(err, "decoding pod, admitting it unchanged", "namespace", req.Namespace)
		return admission.Allowed("")
	}
	result, warnings := m.Mutate(ctx, req.Namespace, pod)
	metrics.AdmissionTotal.WithLabelValues(result).Inc()
	if result != ResultGated {
		return admission.Allowed("").WithWarnings(warnings...)
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		metrics.AdmissionTotal.WithLabelValues(ResultError).Inc()
		log.FromContext(ctx).Error(err, "encoding pod, admitting it unchanged", "namespace", req.Namespace)
		return admission.Allowed("")
	}
	resp := admission.PatchResponseFromRaw(req.Object.Raw, raw)
	if resp.Result != nil && resp.Result.Code == http.StatusInternalServerError {
		return admission.Allowed("")
	}
	return resp.WithWarnings(warnings...)
}

// Mutate decides whether the pod is held for placement and, if so, adds the
// gate to it. namespace is the request's (the pod's may still be empty). It
// returns the admission result and any warnings for the user.
func (m *PodMutator) Mutate(ctx context.Context, namespace string, pod *corev1.Pod) (string, []string) {
	switch {
	case m.Excluded.Has(namespace),
		pod.Annotations[MirrorPodAnnotation] != "",
		pod.Spec.NodeName != "",
		strings.EqualFold(pod.Annotations[annotations.Skip], "true"),
		workload.IsDaemonSetPod(pod),
		decision.Decided(pod),
		decision.HasGate(pod),
		workload.OwnerKey(pod) == "":
		return ResultSkipped, nil
	}
	info, err := workload.Resolve(ctx, m.Reader, namespace, pod)
	switch {
	case errors.Is(err, workload.ErrNotCached):
		// A brand-new ReplicaSet the cache has not seen yet: hold the pod
		// and let the placement controller, which waits for its cache,
		// decide or release it.
		if raw, _, ok := strategy.Find(nil, pod.Annotations); ok {
			if _, perr := strategy.Parse(raw); perr != nil {
				return ResultInvalid, []string{"apportion: " + perr.Error() + "; the pod is placed without apportion"}
			}
		}
	case err != nil:
		log.FromContext(ctx).Error(err, "resolving the pod's workload, admitting it unchanged", "namespace", namespace)
		return ResultError, nil
	case info == nil || !info.Found || info.Skip:
		return ResultSkipped, nil
	default:
		if _, perr := strategy.Parse(info.Strategy); perr != nil {
			ref := &corev1.ObjectReference{Kind: info.Workload.Kind, Namespace: info.Workload.Namespace, Name: info.Workload.Name, UID: info.Workload.UID}
			if m.Recorder != nil {
				m.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, "InvalidStrategy", "Admit", "%s: %v; pods are placed without apportion", info.Source, perr)
			}
			return ResultInvalid, []string{"apportion: " + info.Source.String() + ": " + perr.Error() + "; the pod is placed without apportion"}
		}
	}
	if !m.Leader.Alive(ctx) {
		return ResultNoLeader, nil
	}
	pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: annotations.PlacementGate})
	return ResultGated, nil
}
