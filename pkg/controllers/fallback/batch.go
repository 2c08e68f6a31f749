package fallback

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jellydator/ttlcache/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// Argo's pod annotation naming the pod's node in the Workflow's
// status.nodes; without it (older Argo) the pod's name is the node's ID.
const argoNodeIDAnnotation = "workflows.argoproj.io/node-id"

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

// retrySpend is what deleting a batch pod costs its owner, for its Event.
type retrySpend struct {
	result string // resultRetryJob or resultRetryWorkflow
	cost   string // such as "used retry 2 of backoffLimit 3"
	index  int    // the pod's completion index under backoffLimitPerIndex, else -1
}

// retriedPod is a Job's pod apportion deleted at the cost of a retry.
type retriedPod struct {
	name  string
	uid   types.UID
	index int // its completion index under backoffLimitPerIndex, else -1
}

// retryWait is how much longer the pod must stay unschedulable before a
// retry of its owner may be spent on it: its capacity timeout, counted from
// when the scheduler found it no node (its creation, without that
// condition).
func (c *Controller) retryWait(ctx context.Context, pod *corev1.Pod) time.Duration {
	info, ref := c.resolve(ctx, pod)
	since, ok := unschedulableSince(pod)
	if !ok {
		since = pod.CreationTimestamp.Time
	}
	return since.Add(c.timeoutFor(pod, info, ref)).Sub(c.clock.Now())
}

// retryBudget reads the pod and its owner afresh (the API reader: a Job's
// failed count changes; the cached pod lacks the annotations read here) and
// says what deleting the pod costs. spend nil: keep the pod, for why (or,
// why "", the pod is gone or replaced: nothing to do). An API error is
// returned, and nothing is deleted.
func (c *Controller) retryBudget(ctx context.Context, pod *corev1.Pod, owner *metav1.OwnerReference) (spend *retrySpend, why string, err error) {
	if c.opts.APIReader == nil {
		return nil, "apportion cannot read the " + owner.Kind, nil
	}
	fresh := &corev1.Pod{}
	if err := c.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("reading pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if fresh.UID != pod.UID {
		return nil, "", nil
	}
	if workload.Is(owner, workflowGVK) {
		return c.workflowRetry(ctx, fresh, owner)
	}
	return c.jobRetry(ctx, fresh, owner)
}

// jobRetry: the pod may go while the Job's backoffLimit leaves a retry once
// its failures are counted: status.failed, the failed pods it has yet to
// add (status.uncountedTerminatedPods), the pods apportion deleted that it
// has not seen yet, and this one. Under backoffLimitPerIndex, the same per
// index: the failures of the pod's index before it
// (batch.kubernetes.io/job-index-failure-count), the pods of that index
// apportion deleted that the Job has not seen, and this one.
func (c *Controller) jobRetry(ctx context.Context, pod *corev1.Pod, owner *metav1.OwnerReference) (*retrySpend, string, error) {
	job := &batchv1.Job{}
	err := c.opts.APIReader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: owner.Name}, job)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && job.UID != owner.UID):
		return nil, "the Job is gone", nil
	case err != nil:
		return nil, "", fmt.Errorf("reading Job %s/%s: %w", pod.Namespace, owner.Name, err)
	}
	unseen, err := c.unseen(ctx, job)
	if err != nil {
		return nil, "", err
	}
	failed := int(job.Status.Failed)
	if u := job.Status.UncountedTerminatedPods; u != nil {
		failed += len(u.Failed)
	}
	limit := int(ptr.Deref(job.Spec.BackoffLimit, defaultBackoffLimit))
	retry := failed + len(unseen) + 1
	if retry > limit {
		return nil, fmt.Sprintf("the Job's backoffLimit %d leaves no retry (%d failed%s); %s", limit, failed, deletedNote(len(unseen)), ruleHint), nil
	}
	spend := &retrySpend{result: resultRetryJob, cost: fmt.Sprintf("used retry %d of backoffLimit %d", retry, limit), index: -1}
	perIndex := job.Spec.BackoffLimitPerIndex
	if perIndex == nil {
		return spend, "", nil
	}
	index, err := strconv.Atoi(pod.Annotations[batchv1.JobCompletionIndexAnnotation])
	if err != nil || index < 0 {
		return nil, "the pod carries no completion index to count its retries under the Job's backoffLimitPerIndex", nil
	}
	before, _ := strconv.Atoi(pod.Annotations[batchv1.JobIndexFailureCountAnnotation]) // absent: none
	same := 0
	for _, r := range unseen {
		if r.index == index {
			same++
		}
	}
	if retry = before + same + 1; retry > int(*perIndex) {
		return nil, fmt.Sprintf("the Job's backoffLimitPerIndex %d leaves index %d no retry (%d failed%s); %s",
			*perIndex, index, before, deletedNote(same), ruleHint), nil
	}
	spend.cost, spend.index = fmt.Sprintf("used retry %d of backoffLimitPerIndex %d for index %d", retry, *perIndex, index), index
	return spend, "", nil
}

// deletedNote names the pods apportion deleted that the Job has not
// counted yet, for a kept pod's Event.
func deletedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d more deleted by apportion and not counted yet", n)
}

// unseen returns the Job's pods apportion deleted that the Job controller
// has not yet recorded as failed: not in status.uncountedTerminatedPods and
// still there with the Job's tracking finalizer, which the Job controller
// removes once it has recorded the pod. The others are forgotten.
func (c *Controller) unseen(ctx context.Context, job *batchv1.Job) ([]retriedPod, error) {
	it := c.retried.Get(job.UID)
	if it == nil {
		return nil, nil
	}
	recorded := map[types.UID]bool{}
	if u := job.Status.UncountedTerminatedPods; u != nil {
		for _, uid := range u.Failed {
			recorded[uid] = true
		}
	}
	var left []retriedPod
	for _, r := range it.Value() {
		if recorded[r.uid] {
			continue
		}
		p := &corev1.Pod{}
		err := c.opts.APIReader.Get(ctx, types.NamespacedName{Namespace: job.Namespace, Name: r.name}, p)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading pod %s/%s: %w", job.Namespace, r.name, err)
		case p.UID != r.uid || !slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer):
			continue
		}
		left = append(left, r)
	}
	if len(left) == 0 {
		c.retried.Delete(job.UID)
	} else if len(left) < len(it.Value()) {
		c.retried.Set(job.UID, left, ttlcache.DefaultTTL)
	}
	return left, nil
}

// workflowRetry: the pod may go when Argo retries its step with a new pod:
// its node in the Workflow's status.nodes is an attempt of a Retry node
// whose template's retryStrategy (else the Workflow's spec.retryStrategy)
// retries an errored node (a deleted pod's: retryPolicy Always or OnError),
// has no expression (apportion does not evaluate it), and a limit above the
// attempts made so far (Argo retries while they are at most the limit).
func (c *Controller) workflowRetry(ctx context.Context, pod *corev1.Pod, owner *metav1.OwnerReference) (*retrySpend, string, error) {
	wf := &unstructured.Unstructured{}
	wf.SetGroupVersionKind(workflowGVK)
	err := c.opts.APIReader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: owner.Name}, wf)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && wf.GetUID() != owner.UID):
		return nil, "the Workflow is gone", nil
	case err != nil:
		return nil, "", fmt.Errorf("reading Workflow %s/%s: %w", pod.Namespace, owner.Name, err)
	}
	const noRetry = "Argo does not recreate a Workflow's deleted pod, and its step has no retryStrategy that would retry it " +
		"(retryPolicy Always or OnError, attempts left)"
	nodeID := pod.Annotations[argoNodeIDAnnotation]
	if nodeID == "" {
		nodeID = pod.Name
	}
	nodes, _, _ := unstructured.NestedMap(wf.Object, "status", "nodes")
	if _, ok := nodes[nodeID]; !ok {
		return nil, noRetry + ": its node is not in the Workflow's status", nil
	}
	parent := retryNodeOf(nodes, nodeID)
	if parent == nil {
		return nil, noRetry, nil
	}
	rs := retryStrategyOf(wf.Object, parent)
	if rs == nil {
		return nil, noRetry + ": apportion cannot find its template's retryStrategy", nil
	}
	policy, _, _ := unstructured.NestedString(rs, "retryPolicy")
	if expr, _, _ := unstructured.NestedString(rs, "expression"); expr != "" {
		return nil, noRetry + ": its retryStrategy has an expression, which apportion does not evaluate", nil
	}
	if policy != "Always" && policy != "OnError" {
		if policy == "" {
			policy = "OnFailure (the default)"
		}
		return nil, fmt.Sprintf("%s: its retryStrategy's retryPolicy is %s, which does not retry a deleted pod", noRetry, policy), nil
	}
	children, _, _ := unstructured.NestedStringSlice(parent, "children")
	attempts := max(len(children), 1)
	limit, limited, ok := retryLimit(rs)
	switch {
	case !ok:
		return nil, noRetry + ": its retryStrategy's limit is not a number", nil
	case limited && attempts > limit:
		return nil, fmt.Sprintf("%s: its retryStrategy's limit %d is used up (%d attempts)", noRetry, limit, attempts), nil
	case !limited:
		return &retrySpend{result: resultRetryWorkflow, cost: fmt.Sprintf("used retry %d of its step's retryStrategy (no limit)", attempts), index: -1}, "", nil
	}
	return &retrySpend{result: resultRetryWorkflow, cost: fmt.Sprintf("used retry %d of its step's retryStrategy limit %d", attempts, limit), index: -1}, "", nil
}

// retryNodeOf is the Retry node of a Workflow's status.nodes whose
// attempts (children) include id, or nil.
func retryNodeOf(nodes map[string]any, id string) map[string]any {
	for _, n := range nodes {
		node, ok := n.(map[string]any)
		if !ok {
			continue
		}
		if t, _, _ := unstructured.NestedString(node, "type"); t != "Retry" {
			continue
		}
		if children, _, _ := unstructured.NestedStringSlice(node, "children"); slices.Contains(children, id) {
			return node
		}
	}
	return nil
}

// retryStrategyOf is the retryStrategy Argo applies to a Retry node: its
// template's (spec.templates, with spec.templateDefaults under it), else
// the Workflow's spec.retryStrategy. The spec is the one Argo runs:
// status.storedWorkflowTemplateSpec when the Workflow has one (a Workflow
// of a WorkflowTemplate), else spec. nil: none found, or a template of
// another WorkflowTemplate (templateRef), which apportion does not read.
func retryStrategyOf(wf map[string]any, node map[string]any) map[string]any {
	if _, ref := node["templateRef"]; ref {
		return nil
	}
	spec, found, _ := unstructured.NestedMap(wf, "status", "storedWorkflowTemplateSpec")
	if !found {
		spec, _, _ = unstructured.NestedMap(wf, "spec")
	}
	name, _, _ := unstructured.NestedString(node, "templateName")
	templates, _, _ := unstructured.NestedSlice(spec, "templates")
	for _, t := range templates {
		tmpl, ok := t.(map[string]any)
		if !ok || name == "" || tmpl["name"] != name {
			continue
		}
		if rs, found, _ := unstructured.NestedMap(tmpl, "retryStrategy"); found {
			return rs
		}
	}
	if rs, found, _ := unstructured.NestedMap(spec, "templateDefaults", "retryStrategy"); found {
		return rs
	}
	rs, _, _ := unstructured.NestedMap(spec, "retryStrategy")
	return rs
}

// retryLimit reads a retryStrategy's limit (an integer or a string of
// one): limited false without one (Argo retries without end); ok false
// when it is not a number (an expression apportion does not evaluate).
func retryLimit(rs map[string]any) (limit int, limited, ok bool) {
	switch v := rs["limit"].(type) {
	case nil:
		return 0, false, true
	case int64:
		return int(v), true, true
	case float64:
		return int(v), true, true
	case string:
		n, err := strconv.Atoi(v)
		return n, true, err == nil
	}
	return 0, false, false
}

// spent reports a batch pod deleted at the cost of a retry: counted, a
// Normal Event on its owner naming the pod and the cost, one log line; a
// Job's pod is remembered until the Job has counted it.
func (c *Controller) spent(ctx context.Context, pod *corev1.Pod, owner *metav1.OwnerReference, key capacity.Key, spend *retrySpend) {
	if spend.result == resultRetryJob {
		var prior []retriedPod
		if it := c.retried.Get(owner.UID); it != nil {
			prior = it.Value()
		}
		c.retried.Set(owner.UID, append(slices.Clone(prior), retriedPod{name: pod.Name, uid: pod.UID, index: spend.index}), ttlcache.DefaultTTL)
	}
	metrics.CapacityPodsDeletedTotal.WithLabelValues(spend.result).Inc()
	msg := fmt.Sprintf("deleted pod %s stuck on %s, which cannot get capacity, for a new pod in another group: %s", pod.Name, keyName(key), spend.cost)
	c.recorder.Publish(apevents.Event{Regarding: ownerRef(pod, owner), Type: corev1.EventTypeNormal, Reason: "PendingPodDeleted", Action: "Fallback",
		Message: msg, DedupeValues: []string{string(pod.UID)}})
	log.FromContext(ctx).Info("deleted batch pod stuck on a key out of capacity, at the cost of a retry", "namespace", pod.Namespace, "name", pod.Name,
		"key", string(key), "owner", owner.Kind+" "+owner.Name, "cost", spend.cost)
}

func newRetriedCache() *ttlcache.Cache[types.UID, []retriedPod] {
	return ttlcache.New(ttlcache.WithTTL[types.UID, []retriedPod](jobTTL), ttlcache.WithCapacity[types.UID, []retriedPod](batchMemory),
		ttlcache.WithDisableTouchOnHit[types.UID, []retriedPod]())
}
