package fallback

import (
	"context"
	"fmt"
	"time"

	"github.com/jellydator/ttlcache/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/capacity"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Batch owners. A Job counts a deleted pod as failed unless its
// podFailurePolicy ignores the pod's DisruptionTarget condition; Argo never
// recreates a Workflow's pod (the step fails, or retries with a new pod when
// its retryStrategy says so). Both are told apart by their controller's API
// group and kind.
//
// What the deletion controller does with a batch pod stuck in a key out of
// capacity (batchVerdict, then retryBudget):
//   - a Job whose podFailurePolicy ignores DisruptionTarget: evicted at
//     once, at no cost;
//   - a Job that would count the pod as failed (no podFailurePolicy, or no
//     rule but Count matches it): once the pod has been unschedulable for
//     its capacity timeout, evicted while the Job's backoffLimit (and, for
//     an Indexed Job, backoffLimitPerIndex) leaves a retry, counting the
//     pods apportion deleted that the Job has not counted yet; else kept;
//   - a Workflow's pod: once past its timeout, deleted while the retry
//     node of its step has a retryStrategy that retries a deleted pod
//     (retryPolicy Always or OnError, no expression) with attempts left;
//     else kept;
//   - anything else (a rule that fails the Job or the index, a Job managed
//     by another controller, a Job or Workflow gone): kept.
//
// Every choice gets an Event on the owner, a count in
// apportion_capacity_pods_deleted_total and a log line.
var (
	jobGVK      = schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
	workflowGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Workflow"}
)

// jobControllerName is the built-in Job controller's spec.managedBy; a Job
// another controller manages counts its pods by that controller's rules.
const jobControllerName = "kubernetes.io/job-controller"

// Results of apportion_capacity_pods_deleted_total.
const (
	resultDeleted       = "deleted"
	resultRetryJob      = "deleted_job_retry"
	resultRetryWorkflow = "deleted_workflow_retry"
	resultKeptJob       = "kept_job"
	resultKeptWorkflow  = "kept_workflow"
)

// defaultBackoffLimit is the API's default of a Job's spec.backoffLimit.
const defaultBackoffLimit = 6

// Bounds of what the deletion controller remembers about batch owners and
// their kept pods: a Job's podFailurePolicy is immutable, so it is read once
// per jobTTL; a kept pod is counted once per keptTTL; a pod apportion
// deleted at the cost of a retry is remembered for jobTTL, or until the Job
// has counted it.
const (
	jobTTL      = 10 * time.Minute
	keptTTL     = time.Hour
	batchMemory = 16384
)

// batchOwner is the pod's controller when it is a Job or a Workflow.
func batchOwner(pod *corev1.Pod) *metav1.OwnerReference {
	owner := metav1.GetControllerOfNoCopy(pod)
	if workload.Is(owner, jobGVK) || workload.Is(owner, workflowGVK) {
		return owner
	}
	return nil
}

// deletable reports whether the fallback may act on the pod: its controller
// recreates it (ReplicaSet, StatefulSet) or it is a batch pod, for which
// reconcileDeletion decides.
func deletable(pod *corev1.Pod) bool {
	return workload.Recreated(pod) || batchOwner(pod) != nil
}

// jobPolicy is what the deletion reads of a Job, cached by its UID.
type jobPolicy struct {
	policy *batchv1.PodFailurePolicy
	why    string // why its pods are kept whatever the policy; "" if none
}

// batchAction is what the deletion controller does with a batch pod.
type batchAction int

const (
	// batchKeep: the pod stays pending.
	batchKeep batchAction = iota
	// batchEvict: evicted now; it costs its Job no retry.
	batchEvict
	// batchRetry: deleted, at the cost of a retry, once past its timeout
	// and only if retryBudget finds one left.
	batchRetry
)

// ruleHint is what a Job can add so that its pods are evicted at no cost.
const ruleHint = "a podFailurePolicy rule {action: Ignore, onPodConditions: [{type: DisruptionTarget}]} lets apportion evict its pending pods at no cost"

// batchVerdict says what may become of a batch pod, from what does not
// change (the Job's podFailurePolicy, read once per jobTTL): for
// batchKeep, result and why say what keeps it. An error reading the Job is
// returned, and nothing is deleted.
func (c *Controller) batchVerdict(ctx context.Context, pod *corev1.Pod, owner *metav1.OwnerReference) (action batchAction, result, why string, err error) {
	if workload.Is(owner, workflowGVK) {
		return batchRetry, "", "", nil
	}
	jp, err := c.jobPolicy(ctx, pod.Namespace, owner)
	if err != nil {
		return batchKeep, "", "", err
	}
	if jp.why != "" {
		return batchKeep, resultKeptJob, jp.why, nil
	}
	switch act, judged := disruptionAction(jp.policy, pod); {
	case !judged:
		return batchKeep, resultKeptJob, "a container of the pod ran, and the Job's podFailurePolicy could match its exit code", nil
	case act == batchv1.PodFailurePolicyActionIgnore:
		return batchEvict, "", "", nil
	case act == "" || act == batchv1.PodFailurePolicyActionCount:
		return batchRetry, "", "", nil
	default:
		return batchKeep, resultKeptJob, fmt.Sprintf("the Job's podFailurePolicy would %s on a deleted pod; %s", act, ruleHint), nil
	}
}

// jobPolicy reads the Job that owner names (with the API reader: there is
// no cache of Jobs) once per jobTTL: its podFailurePolicy cannot change.
func (c *Controller) jobPolicy(ctx context.Context, namespace string, owner *metav1.OwnerReference) (jobPolicy, error) {
	if it := c.jobs.Get(owner.UID); it != nil {
		return it.Value(), nil
	}
	if c.opts.APIReader == nil {
		return jobPolicy{why: "apportion cannot read the Job"}, nil
	}
	job := &batchv1.Job{}
	err := c.opts.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: owner.Name}, job)
	var jp jobPolicy
	switch {
	case apierrors.IsNotFound(err) || (err == nil && job.UID != owner.UID):
		jp.why = "the Job is gone"
	case err != nil:
		return jobPolicy{}, fmt.Errorf("reading Job %s/%s: %w", namespace, owner.Name, err)
	case job.Spec.ManagedBy != nil && *job.Spec.ManagedBy != jobControllerName:
		jp.why = fmt.Sprintf("the Job is managed by %q, whose way of counting deleted pods apportion does not know", *job.Spec.ManagedBy)
	default:
		jp.policy = job.Spec.PodFailurePolicy
	}
	c.jobs.Set(owner.UID, jp, ttlcache.DefaultTTL)
	return jp, nil
}

// ignoresDisruption reports whether the Job controller, given the pod once
// evicted (Failed, with DisruptionTarget=True), would match an Ignore rule
// of policy first.
func ignoresDisruption(policy *batchv1.PodFailurePolicy, pod *corev1.Pod) bool {
	act, judged := disruptionAction(policy, pod)
	return judged && act == batchv1.PodFailurePolicyActionIgnore
}

// disruptionAction is the action of the first rule of policy the Job
// controller would match, given the pod once evicted (Failed, with
// DisruptionTarget=True): its rules are tried in order and the first match
// decides; "" when none matches (the failure is counted). A pod with a
// terminated container is not judged (judged false): rules on exit codes
// could match it.
func disruptionAction(policy *batchv1.PodFailurePolicy, pod *corev1.Pod) (action batchv1.PodFailurePolicyAction, judged bool) {
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, s := range statuses {
			if s.State.Terminated != nil {
				return "", false
			}
		}
	}
	if policy == nil {
		return "", true
	}
	conds := map[corev1.PodConditionType]corev1.ConditionStatus{}
	for _, c := range pod.Status.Conditions {
		conds[c.Type] = c.Status
	}
	conds[corev1.DisruptionTarget] = corev1.ConditionTrue
	for _, rule := range policy.Rules {
		if rule.OnExitCodes != nil {
			continue // no container ran
		}
		for _, p := range rule.OnPodConditions {
			status := p.Status
			if status == "" {
				status = corev1.ConditionTrue // the API's default
			}
			if conds[p.Type] == status {
				return rule.Action, true
			}
		}
	}
	return "", true
}

// evict deletes a Job's pod through the Eviction API: the API server adds
// the DisruptionTarget condition under the same UID and resourceVersion
// preconditions, then deletes the pod, so that the Job's podFailurePolicy
// ignores it. A Pending pod is evicted whatever its PodDisruptionBudgets.
func (c *Controller) evict(ctx context.Context, pod *corev1.Pod) error {
	return c.kubeClient.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID, ResourceVersion: &pod.ResourceVersion}},
	})
}

// keep leaves a batch pod that cannot go: counted once per pod (decided
// again after keptTTL), a Warning Event on its owner once an hour per owner
// and reason, one log line.
func (c *Controller) keep(ctx context.Context, pod *corev1.Pod, owner *metav1.OwnerReference, key capacity.Key, result, why string) {
	if it := c.kept.Get(pod.UID); it != nil {
		return
	}
	c.kept.Set(pod.UID, struct{}{}, ttlcache.DefaultTTL)
	metrics.CapacityPodsDeletedTotal.WithLabelValues(result).Inc()
	c.recorder.Publish(apevents.Event{Regarding: ownerRef(pod, owner), Type: corev1.EventTypeWarning, Reason: "PendingPodKept", Action: "Fallback",
		Message: fmt.Sprintf("%s cannot get capacity; apportion leaves pod %s pending there and places the next pods in other groups: %s",
			keyName(key), pod.Name, why),
		DedupeValues: []string{string(owner.UID), result, why}, DedupeTimeout: time.Hour})
	log.FromContext(ctx).Info("batch pod stuck on a key out of capacity left pending", "namespace", pod.Namespace, "name", pod.Name,
		"key", string(key), "owner", owner.Kind+" "+owner.Name, "reason", result, "why", why)
}

// ownerRef is the pod's owner as an Event's object.
func ownerRef(pod *corev1.Pod, owner *metav1.OwnerReference) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: owner.APIVersion, Kind: owner.Kind, Namespace: pod.Namespace, Name: owner.Name, UID: owner.UID}
}

// keyName names a key for people: NodePool P, or node labels L.
func keyName(key capacity.Key) string {
	if key.Kind() == capacity.KindLabels {
		return "node labels " + key.Name()
	}
	return "NodePool " + key.Name()
}

func newJobCache() *ttlcache.Cache[types.UID, jobPolicy] {
	return ttlcache.New(ttlcache.WithTTL[types.UID, jobPolicy](jobTTL), ttlcache.WithCapacity[types.UID, jobPolicy](batchMemory),
		ttlcache.WithDisableTouchOnHit[types.UID, jobPolicy]())
}

func newKeptCache() *ttlcache.Cache[types.UID, struct{}] {
	return ttlcache.New(ttlcache.WithTTL[types.UID, struct{}](keptTTL), ttlcache.WithCapacity[types.UID, struct{}](batchMemory),
		ttlcache.WithDisableTouchOnHit[types.UID, struct{}]())
}
