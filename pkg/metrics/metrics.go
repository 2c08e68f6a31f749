// Package metrics defines apportion's Prometheus collectors. They live on
// controller-runtime's registry, served by the manager's metrics endpoint next
// to the built-in controller and webhook metrics (which are not duplicated
// here). Register adds them; nothing is registered at import time.
// Bounded caps the values of a label that come from tenant input
// (bounded.go).
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const (
	namespace = "apportion"

	// Label names.
	LabelResult    = "result"
	LabelGroup     = "group"
	LabelNodePool  = "nodepool"
	LabelReason    = "reason"
	LabelOperation = "operation"
	LabelKind      = "kind"
	LabelScope     = "scope"
	LabelRegistry  = "registry"
	// LabelWorkloadNamespace, LabelKind and LabelName name a workload. Not
	// "namespace": Prometheus gives every series scraped from apportion
	// the namespace of its target (apportion's own), which would rename a
	// namespace label of the series to exported_namespace.
	LabelWorkloadNamespace = "workload_namespace"
	LabelName              = "name"
	LabelState             = "state"
)

// Values of the state label of apportion_workload_pods.
const (
	StateDesired = "desired"
	StateRunning = "running"
)

var (
	// AdmissionTotal counts pod admissions by result: gated, skipped,
	// invalid (bad strategy, admitted unchanged), no_leader, error.
	AdmissionTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "admission", Name: "pods_total",
		Help: "Pod admissions by result. Labels: result.",
	}, []string{LabelResult})
	// DecisionAnnotationsRemovedTotal counts pods created with decision
	// annotations (apportion.dev/group, nodepool, decision, fallback,
	// signature) that the pod mutator removed: only apportion writes them.
	DecisionAnnotationsRemovedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "admission", Name: "decision_annotations_removed_total",
		Help: "Pods created with apportion's decision annotations written by a client, removed at admission.",
	})
	// AdmissionSeconds is the server-side time of the pod mutator.
	AdmissionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "admission", Name: "duration_seconds",
		Help:    "Time spent deciding a pod admission, server side.",
		Buckets: []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05},
	})
	// DecisionsTotal counts placement decisions by group, NodePool and result
	// (placed, shadow: recorded in apportion.dev/shadow only, not_written:
	// the patch kept conflicting, refused: an admission policy refused the
	// patch, not_leader: this replica no longer held a fresh Lease and left
	// the pod gated, error).
	DecisionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "placement", Name: "decisions_total",
		Help: "Placement decisions. Labels: group, nodepool, result.",
	}, []string{LabelGroup, LabelNodePool, LabelResult})
	// GateWaitSeconds is the time from pod creation to the gate's removal.
	GateWaitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "placement", Name: "gate_wait_seconds",
		Help:    "Time a pod spent held by the placement gate.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
	// ReleasedTotal counts pods released without a decision, by reason
	// (timeout, no_strategy, invalid_strategy, no_group, error,
	// refused_by_admission, ...), and,
	// with the reason prefixed shadow_, pods in shadow mode left without a
	// shadow decision (no gate to remove, nothing written).
	ReleasedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "placement", Name: "released_total",
		Help: "Pods whose gate was removed without a decision. Labels: reason.",
	}, []string{LabelReason})
	// APIErrorsTotal counts failed API calls on the placement path by
	// operation (decide, release); each is retried until the gate timeout.
	APIErrorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "placement", Name: "api_errors_total",
		Help: "Failed API calls on the placement path, retried. Labels: operation.",
	}, []string{LabelOperation})
	// RefusedTotal counts writes on the placement path that an admission
	// policy (a ValidatingAdmissionPolicy, or a webhook such as Kyverno's or
	// Gatekeeper's) refused, by operation: decide (the pod is then released
	// unchanged, released_total's reason refused_by_admission) or release
	// (the gate's removal was refused too: the pod stays gated, and the gate
	// janitor tries again once per gate timeout).
	RefusedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "placement", Name: "refused_total",
		Help: "Writes on the placement path refused by an admission policy. Labels: operation (decide, release).",
	}, []string{LabelOperation})
	// DeletionCostPatchesTotal counts pod-deletion-cost updates.
	DeletionCostPatchesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "deletioncost", Name: "patches_total",
		Help: "Pod deletion cost annotations written.",
	})
	// DeletionCostSecondWriterTotal counts deletion costs apportion
	// overwrote that another writer (Karpenter's PodDeletionCostManagement,
	// say) had set.
	DeletionCostSecondWriterTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "deletioncost", Name: "second_writer_total",
		Help: "Pod deletion costs apportion overwrote after another field manager (such as Karpenter's PodDeletionCostManagement) wrote them.",
	})
	// CertificateExpiryTimestampSeconds is when the webhook's certificates
	// expire, by kind (ca, serving), as every replica sees them in the Secret:
	// an alert on it catches a rotation that stopped working.
	CertificateExpiryTimestampSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "certificate", Name: "expiry_timestamp_seconds",
		Help: "Expiry of the self-managed webhook certificates, in Unix seconds. Labels: kind.",
	}, []string{LabelKind})
	// CertificateRotationsTotal counts certificates this replica generated and
	// stored, by kind (ca, serving).
	CertificateRotationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "certificate", Name: "rotations_total",
		Help: "Self-managed webhook certificates generated and stored by this replica. Labels: kind.",
	}, []string{LabelKind})
	// ImageLookupsTotal counts image platform look-ups by result: hit (served
	// from the cache), miss (fetched from the registry), error (failed,
	// including a cached failure, an open breaker and a caller's timeout).
	ImageLookupsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "image", Name: "lookups_total",
		Help: "Image platform look-ups. Labels: result (hit, miss, error).",
	}, []string{LabelResult})
	// ImageRegistrySeconds is the time of one registry look-up (the manifest
	// and, for a single-platform image, its config), whatever its outcome.
	ImageRegistrySeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Subsystem: "image", Name: "registry_duration_seconds",
		Help:    "Time of one registry look-up of an image's platforms.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20},
	})
	// ImageCacheEntries is the number of cached image references.
	ImageCacheEntries = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "image", Name: "cache_entries",
		Help: "Image references in the platform cache.",
	})
	// ImageBreakerOpenTotal counts the openings of a registry's circuit
	// breaker, by registry host.
	ImageBreakerOpenTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "image", Name: "breaker_open_total",
		Help: "Times a registry's circuit breaker opened. Labels: registry.",
	}, []string{LabelRegistry})
	// ImageRegistryDeniedTotal counts image look-ups refused by the
	// registry hosts setting (settings.imageRegistries), by reason
	// (loopback, link_local, metadata, cluster_name, deny_entry): the host the
	// reference names, or a redirect's.
	ImageRegistryDeniedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "image", Name: "registry_denied_total",
		Help: "Image look-ups refused by the registry hosts setting. Labels: reason (loopback, link_local, cluster_name, deny_entry).",
	}, []string{LabelReason})
	// CapacityUnavailableTotal counts outages: a NodePool (kind nodepool) or
	// a group's label set (kind labels) newly marked out of capacity, for
	// every workload (scope cluster) or for one (scope workload), by reason
	// (not_ready, limits, no_instance_types, launch_failed, no_offering,
	// no_nodeclaim, timeout).
	CapacityUnavailableTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "capacity", Name: "unavailable_total",
		Help: "NodePools or label sets newly marked out of capacity. Labels: kind (nodepool, labels), scope (cluster, workload), reason.",
	}, []string{LabelKind, LabelScope, LabelReason})
	// CapacityUnavailable is the number of keys out of capacity now, by kind
	// and scope.
	CapacityUnavailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "capacity", Name: "unavailable",
		Help: "NodePools or label sets out of capacity now. Labels: kind (nodepool, labels), scope (cluster, workload).",
	}, []string{LabelKind, LabelScope})
	// CapacityRechecksTotal counts what became of outages whose evidence was
	// checked again: still (kept out), lifted (the evidence is gone: back
	// at once), expired (nothing to check: back at the end of its TTL).
	CapacityRechecksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "capacity", Name: "rechecks_total",
		Help: "NodePool outages checked again against their evidence. Labels: reason, result (still, lifted, expired).",
	}, []string{LabelReason, LabelResult})
	// CapacityPodsDeletedTotal counts stuck pods deleted so that their
	// controller recreates them in a group that has capacity at no cost
	// (result deleted: a ReplicaSet's or StatefulSet's pod, or a Job's whose
	// podFailurePolicy ignores DisruptionTarget), the batch pods deleted at
	// the cost of a retry their owner had left (deleted_job_retry: of the
	// Job's backoffLimit or backoffLimitPerIndex; deleted_workflow_retry: of
	// the Argo step's retryStrategy), and the batch pods left pending:
	// kept_job, kept_workflow (no retry left, or none that would replace
	// the pod).
	CapacityPodsDeletedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "capacity", Name: "pods_deleted_total",
		Help: "Pending pods of an out-of-capacity NodePool or label set deleted for recreation elsewhere, or kept. " +
			"Labels: result (deleted, deleted_job_retry, deleted_workflow_retry, kept_job, kept_workflow).",
	}, []string{LabelResult})
	// WorkloadDrift is 1 while a workload placed by a strategy has been off
	// it (outside quota, pods outside every group, or a group left out)
	// for longer than --drift-after, else 0; per workload, for at most
	// Workloads of them.
	WorkloadDrift = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "workload", Name: "drift",
		Help: "1 while a workload placed by a strategy has been off it for longer than --drift-after, else 0. Labels: workload_namespace, kind, name.",
	}, []string{LabelWorkloadNamespace, LabelKind, LabelName})
	// WorkloadPods is a workload's pods by group and state: desired (the
	// quota method's count at spec.replicas over the groups served) and
	// running (Running pods on the group's nodes; group "none": on nodes
	// of no group); for at most Workloads workloads.
	WorkloadPods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "workload", Name: "pods",
		Help: "Pods of a workload placed by a strategy, by group and state (desired, running). Labels: workload_namespace, kind, name, group, state.",
	}, []string{LabelWorkloadNamespace, LabelKind, LabelName, LabelGroup, LabelState})
	// WorkloadsDrifting counts the workloads off their strategy for longer
	// than --drift-after, all of them (not capped).
	WorkloadsDrifting = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "workloads_drifting",
		Help: "Workloads placed by a strategy that have been off it for longer than --drift-after.",
	})
	// RebalanceEvictionsTotal counts evictions of fallback pods once their
	// group was back (apportion.dev/rebalance).
	RebalanceEvictionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "rebalance", Name: "evictions_total",
		Help: "Evictions of fallback pods whose group has capacity again. Labels: result (evicted, disruption_budget, error).",
	}, []string{LabelResult})
)

var once sync.Once

// Collectors are apportion's own collectors, in the order Register adds
// them: what the metrics reference page and the monitoring tests read.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{AdmissionTotal, DecisionAnnotationsRemovedTotal, AdmissionSeconds, DecisionsTotal, GateWaitSeconds, ReleasedTotal, APIErrorsTotal, RefusedTotal, DeletionCostPatchesTotal, DeletionCostSecondWriterTotal,
		CertificateExpiryTimestampSeconds, CertificateRotationsTotal,
		ImageLookupsTotal, ImageRegistrySeconds, ImageCacheEntries, ImageBreakerOpenTotal, ImageRegistryDeniedTotal,
		CapacityUnavailableTotal, CapacityUnavailable, CapacityRechecksTotal, CapacityPodsDeletedTotal, RebalanceEvictionsTotal,
		WorkloadDrift, WorkloadPods, WorkloadsDrifting}
}

// Register adds the collectors to controller-runtime's registry; safe to call
// more than once.
func Register() {
	once.Do(func() {
		crmetrics.Registry.MustRegister(Collectors()...)
	})
}
