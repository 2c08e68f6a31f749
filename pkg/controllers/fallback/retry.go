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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/capacity"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// What a batch pod's deletion costs its owner when it is not free: a retry
// of the Job's backoffLimit (jobRetry) or of the Argo step's retryStrategy
// (workflowRetry, workflowretry.go), read afresh just before the deletion.

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
