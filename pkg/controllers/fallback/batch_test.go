package fallback

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/test"
)

// ignoreDisruption is the rule that lets a Job's pending pods be evicted.
var ignoreDisruption = batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
	OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}

func job(name string, rules ...batchv1.PodFailurePolicyRule) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name + "-uid")}}
	if len(rules) > 0 {
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: rules}
	}
	return j
}

func ownedByJob(name string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = test.OwnedBy("batch/v1", "Job", name, types.UID(name+"-uid"))
		p.Labels = map[string]string{"batch.kubernetes.io/job-name": name}
	}
}

// deletions records how the fixture's pods were deleted: plain deletes and
// evictions (with their preconditions); an eviction deletes the pod, as the
// API server does.
type deletions struct {
	deletes   []string
	evictions []*policyv1.Eviction
	reads     int
}

func (d *deletions) funcs() *interceptor.Funcs {
	return &interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			d.deletes = append(d.deletes, obj.GetName())
			return c.Delete(ctx, obj, opts...)
		},
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*batchv1.Job); ok {
				d.reads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, _ ...client.SubResourceCreateOption) error {
			ev, ok := subObj.(*policyv1.Eviction)
			if sub != "eviction" || !ok {
				return nil
			}
			d.evictions = append(d.evictions, ev)
			return c.Delete(ctx, obj, client.Preconditions(*ev.DeleteOptions.Preconditions))
		},
	}
}

func (f *fixture) keptEvents() []string {
	var kept []string
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning PendingPodKept ") {
			kept = append(kept, e)
		}
	}
	return kept
}

// TestJobPodEvicted: a Job whose podFailurePolicy ignores DisruptionTarget
// gets its stuck pod evicted (the API server adds the condition, under the
// pod's UID and resourceVersion), never deleted outright: the Job then
// recreates it without counting a failure.
func TestJobPodEvicted(t *testing.T) {
	d := &deletions{}
	f := newFixture(t, Options{}, d.funcs(), nil, nodePool("spot", metav1.ConditionFalse), job("etl", ignoreDisruption),
		pendingPod("etl-1", "spot", now.Add(-time.Minute), ownedByJob("etl")))
	f.ctrl.opts.APIReader = f.client
	p, _ := f.get("etl-1")
	deleted := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultDeleted))

	f.reconcile("etl-1")
	f.drain()
	if _, ok := f.get("etl-1"); ok {
		t.Fatal("the Job's stuck pod was not evicted")
	}
	if len(d.deletes) != 0 {
		t.Errorf("deleted without the Eviction API: %v", d.deletes)
	}
	if len(d.evictions) != 1 {
		t.Fatalf("%d evictions, want 1", len(d.evictions))
	}
	pre := d.evictions[0].DeleteOptions.Preconditions
	if pre == nil || pre.UID == nil || *pre.UID != p.UID || pre.ResourceVersion == nil || *pre.ResourceVersion != p.ResourceVersion {
		t.Errorf("eviction preconditions %+v; want UID %s and resourceVersion %s", pre, p.UID, p.ResourceVersion)
	}
	if got := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultDeleted)) - deleted; got != 1 {
		t.Errorf("pods_deleted_total{result=deleted} grew by %v, want 1", got)
	}
	if kept := f.keptEvents(); len(kept) != 0 {
		t.Errorf("PendingPodKept for an evicted pod: %q", kept)
	}

	// A second pod of the same Job: the Job is not read again.
	if err := f.client.Create(context.Background(), pendingPod("etl-2", "spot", now, ownedByJob("etl"))); err != nil {
		t.Fatal(err)
	}
	f.reconcile("etl-2")
	f.drain()
	if _, ok := f.get("etl-2"); ok || len(d.evictions) != 2 {
		t.Errorf("second pod: exists %v, evictions %d; want evicted", ok, len(d.evictions))
	}
	if d.reads != 1 {
		t.Errorf("the Job was read %d times, want once", d.reads)
	}
}

// TestJobPodKept: a Job whose podFailurePolicy would fail the Job on a
// deleted pod, a pod a container of which ran (rules on exit codes could
// match it), a Job another controller manages, a Job gone: the pod stays,
// its Job gets one Warning Event that says why, and the pod is counted once
// as kept_job, without waiting for its timeout.
func TestJobPodKept(t *testing.T) {
	failOnDisruption := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob, OnPodConditions: ignoreDisruption.OnPodConditions}
	elsewhere := job("etl", ignoreDisruption)
	elsewhere.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
	ran := func(p *corev1.Pod) {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
	}
	for _, tc := range []struct {
		name string
		job  *batchv1.Job
		pod  []podOpt
		want string
	}{
		{"fails the Job", job("etl", failOnDisruption, ignoreDisruption), nil, "would FailJob on a deleted pod; a podFailurePolicy rule {action: Ignore, onPodConditions: [{type: DisruptionTarget}]}"},
		{"a container ran", job("etl"), []podOpt{ran}, "a container of the pod ran"},
		{"managed elsewhere", elsewhere, nil, `managed by "kueue.x-k8s.io/multikueue"`},
		{"gone", job("other"), nil, "the Job is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &deletions{}
			f := newFixture(t, Options{}, d.funcs(), nil, nodePool("spot", metav1.ConditionFalse), tc.job,
				pendingPod("etl-1", "spot", now.Add(-time.Minute), append([]podOpt{ownedByJob("etl")}, tc.pod...)...))
			f.ctrl.opts.APIReader = f.client
			kept := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultKeptJob))

			f.reconcile("etl-1")
			f.drain()
			f.reconcile("etl-1") // again: no second count or Event
			f.drain()
			if _, ok := f.get("etl-1"); !ok || len(d.deletes)+len(d.evictions) != 0 {
				t.Fatalf("exists %v, deletes %v, evictions %d; want the pod kept", ok, d.deletes, len(d.evictions))
			}
			evs := f.keptEvents()
			if len(evs) != 1 || !strings.Contains(evs[0], "NodePool spot cannot get capacity; apportion leaves pod etl-1 pending there") ||
				!strings.Contains(evs[0], tc.want) {
				t.Errorf("events %q; want one PendingPodKept saying %q", evs, tc.want)
			}
			if got := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultKeptJob)) - kept; got != 1 {
				t.Errorf("pods_deleted_total{result=kept_job} grew by %v, want 1", got)
			}
		})
	}
}

// retryFixture is a fixture whose Job and pods are the given ones, the API
// reader its client, the NodePool spot not Ready (out for everyone).
func retryFixture(t *testing.T, d *deletions, objs ...client.Object) *fixture {
	t.Helper()
	f := newFixture(t, Options{}, d.funcs(), nil, append(objs, nodePool("spot", metav1.ConditionFalse))...)
	f.ctrl.opts.APIReader = f.client
	return f
}

// tracked gives a Job's pod the Job controller's tracking finalizer: a
// deleted pod stays (terminating) until the Job has recorded it.
func tracked(p *corev1.Pod) { p.Finalizers = []string{batchv1.JobTrackingFinalizer} }

// withBackoff sets a Job's backoffLimit and status.failed.
func withBackoff(j *batchv1.Job, limit, failed int32) *batchv1.Job {
	j.Spec.BackoffLimit, j.Status.Failed = ptr.To(limit), failed
	return j
}

// batchEvents are the PendingPodKept and PendingPodDeleted Events
// recorded since the last call.
func (f *fixture) batchEvents() []string {
	var out []string
	for _, e := range f.events() {
		if strings.Contains(e, " PendingPodKept ") || strings.Contains(e, " PendingPodDeleted ") {
			out = append(out, e)
		}
	}
	return out
}

// retryMetrics reads the pods_deleted_total results the retry path moves.
func retryMetrics() map[string]float64 {
	out := map[string]float64{}
	for _, r := range []string{resultDeleted, resultRetryJob, resultRetryWorkflow, resultKeptJob, resultKeptWorkflow} {
		out[r] = testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(r))
	}
	return out
}

// grown is how much each result grew since before.
func grown(before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for r, v := range retryMetrics() {
		if d := v - before[r]; d != 0 {
			out[r] = d
		}
	}
	return out
}

// TestJobPodRetried: a Job that would count a deleted pod as failed (no
// podFailurePolicy, or none of its rules but Count matching) has its stuck
// pod evicted once the pod is past its capacity timeout, while its
// backoffLimit leaves a retry counting status.failed and the failures it
// has yet to count; otherwise the pod is kept. Each choice is an Event on
// the Job naming the pod and the cost, and a count.
func TestJobPodRetried(t *testing.T) {
	countFirst := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionCount,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}}}
	failOnExit := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}}
	uncounted := withBackoff(job("etl"), 3, 2)
	uncounted.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Failed: []types.UID{"gone-uid"}}
	for _, tc := range []struct {
		name   string
		job    *batchv1.Job
		delete bool
		want   string
		result string
	}{
		{"no policy", withBackoff(job("etl"), 3, 0), true, "Normal PendingPodDeleted deleted pod etl-1 stuck on NodePool spot, which cannot get capacity, for a new pod in another group: used retry 1 of backoffLimit 3", resultRetryJob},
		{"retries used", withBackoff(job("etl"), 3, 2), true, "used retry 3 of backoffLimit 3", resultRetryJob},
		{"exit codes only", withBackoff(job("etl", failOnExit), 1, 0), true, "used retry 1 of backoffLimit 1", resultRetryJob},
		{"counted first", withBackoff(job("etl", countFirst, ignoreDisruption), 2, 0), true, "used retry 1 of backoffLimit 2", resultRetryJob},
		{"default backoffLimit", job("etl"), true, "used retry 1 of backoffLimit 6", resultRetryJob},
		{"backoffLimit 0", withBackoff(job("etl"), 0, 0), false, "Warning PendingPodKept NodePool spot cannot get capacity; apportion leaves pod etl-1 pending there and places the next pods in other groups: the Job's backoffLimit 0 leaves no retry (0 failed)", resultKeptJob},
		{"used up", withBackoff(job("etl"), 2, 2), false, "the Job's backoffLimit 2 leaves no retry (2 failed)", resultKeptJob},
		{"uncounted failures", uncounted, false, "the Job's backoffLimit 3 leaves no retry (3 failed)", resultKeptJob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &deletions{}
			f := retryFixture(t, d, tc.job, pendingPod("etl-1", "spot", now.Add(-4*time.Minute), ownedByJob("etl")))
			before := retryMetrics()
			exists := f.decideTwice("etl-1")
			if exists == tc.delete || len(d.deletes) != 0 || len(d.evictions) != map[bool]int{true: 1}[tc.delete] {
				t.Fatalf("exists %v, deletes %v, evictions %d; want deleted %v, through the Eviction API", exists, d.deletes, len(d.evictions), tc.delete)
			}
			mine := f.batchEvents()
			if len(mine) != 1 || !strings.Contains(mine[0], tc.want) {
				t.Errorf("events %q; want one saying %q", mine, tc.want)
			}
			if got := grown(before); len(got) != 1 || got[tc.result] != 1 {
				t.Errorf("pods_deleted_total grew by %v, want {%s: 1}", got, tc.result)
			}
		})
	}
}

// TestJobRetryWaitsForTimeout: a retry is not spent on a pod before its
// capacity timeout (3m here): the deletion controller comes back when it
// ends, having read nothing and spent no token of the limiter.
func TestJobRetryWaitsForTimeout(t *testing.T) {
	d := &deletions{}
	f := retryFixture(t, d, withBackoff(job("etl"), 3, 0), pendingPod("etl-1", "spot", now.Add(-time.Minute), ownedByJob("etl")))
	f.ctrl.jobs.Set("etl-uid", jobPolicy{}, 0) // the policy is cached: no read at all
	f.reconcile("etl-1")                       // marks spot out
	<-f.ctrl.deletions
	res, err := f.ctrl.reconcileDeletion(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: "etl-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != 2*time.Minute {
		t.Errorf("requeue after %v, want 2m (the rest of the timeout)", res.RequeueAfter)
	}
	if _, ok := f.get("etl-1"); !ok || len(d.evictions) != 0 || d.reads != 0 || f.limiter.waits != 0 {
		t.Errorf("exists %v, evictions %d, Job reads %d, limiter waits %d; want the pod left, nothing read or spent", ok, len(d.evictions), d.reads, f.limiter.waits)
	}
	if evs := f.batchEvents(); len(evs) != 0 {
		t.Errorf("events before the timeout: %q", evs)
	}

	// The workload's timeout, when it sets one, counts instead.
	f.clock.Step(time.Minute)
	p, _ := f.get("etl-1")
	p.Annotations[annotations.CapacityTimeout] = "90s"
	if err := f.client.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if res, err = f.ctrl.reconcileDeletion(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: "etl-1"}}); err != nil || res.RequeueAfter != 0 {
		t.Errorf("past the workload's 90s: requeue %v, error %v", res.RequeueAfter, err)
	}
	if len(d.evictions) != 1 {
		t.Errorf("past the workload's 90s: %d evictions, want 1", len(d.evictions))
	}
}

// TestJobRetriesCountInFlight: two stuck pods of a Job with backoffLimit 1:
// the first is evicted; the Job has not counted it yet (it is still there,
// terminating, with the Job's tracking finalizer), so the second is kept,
// and its Event says why. Once the Job has seen the first (in
// status.uncountedTerminatedPods), and once it has counted it (in
// status.failed, the finalizer removed), it is not counted twice: with the
// backoffLimit raised, the next pods may go.
func TestJobRetriesCountInFlight(t *testing.T) {
	d := &deletions{}
	j := withBackoff(job("etl"), 1, 0)
	f := retryFixture(t, d, j,
		pendingPod("etl-1", "spot", now.Add(-4*time.Minute), ownedByJob("etl"), tracked),
		pendingPod("etl-2", "spot", now.Add(-4*time.Minute), ownedByJob("etl"), tracked))
	before := retryMetrics()
	f.reconcile("etl-1")
	f.drain()
	f.reconcile("etl-2")
	f.drain()
	if len(d.evictions) != 1 || d.evictions[0].Name != "etl-1" {
		t.Fatalf("evictions %v; want etl-1 only", d.evictions)
	}
	if p, ok := f.get("etl-1"); !ok || p.DeletionTimestamp == nil {
		t.Fatal("etl-1 is not terminating: the fixture does not hold it for the Job")
	}
	evs := f.batchEvents()
	want := []string{"used retry 1 of backoffLimit 1", "the Job's backoffLimit 1 leaves no retry (0 failed, 1 more deleted by apportion and not counted yet)"}
	if len(evs) != 2 || !strings.Contains(evs[0], want[0]) || !strings.Contains(evs[1], want[1]) {
		t.Errorf("events %q; want %q", evs, want)
	}
	if got := grown(before); got[resultRetryJob] != 1 || got[resultKeptJob] != 1 {
		t.Errorf("pods_deleted_total grew by %v, want one retry and one kept", got)
	}

	// The Job controller has seen etl-1 fail (in
	// status.uncountedTerminatedPods, the finalizer not removed yet); the
	// Job's backoffLimit is raised to 2: etl-1 counts once.
	f.jobAccounts(j, 2, 0, "etl-1-uid")
	f.retryOne("etl-3", d, "used retry 2 of backoffLimit 2")

	// It has counted both and let them go: they count once, in
	// status.failed; backoffLimit 3.
	for _, name := range []string{"etl-1", "etl-3"} {
		p, _ := f.get(name)
		p.Finalizers = nil
		if err := f.client.Update(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	f.jobAccounts(j, 3, 2)
	f.retryOne("etl-4", d, "used retry 3 of backoffLimit 3")
}

// jobAccounts sets the Job's backoffLimit, status.failed and the failed
// pods it has yet to count, as the Job controller would.
func (f *fixture) jobAccounts(j *batchv1.Job, limit, failed int32, uncounted ...types.UID) {
	f.t.Helper()
	ctx := context.Background()
	if err := f.client.Get(ctx, client.ObjectKeyFromObject(j), j); err != nil {
		f.t.Fatal(err)
	}
	j.Spec.BackoffLimit = ptr.To(limit)
	if err := f.client.Update(ctx, j); err != nil {
		f.t.Fatal(err)
	}
	j.Status.Failed, j.Status.UncountedTerminatedPods = failed, &batchv1.UncountedTerminatedPods{Failed: uncounted}
	if err := f.client.Status().Update(ctx, j); err != nil {
		f.t.Fatal(err)
	}
}

// retryOne creates a stuck pod of the Job etl, runs the controllers over
// it, and checks it was evicted with a PendingPodDeleted Event saying cost.
func (f *fixture) retryOne(name string, d *deletions, cost string) {
	f.t.Helper()
	if err := f.client.Create(context.Background(), pendingPod(name, "spot", now.Add(-4*time.Minute), ownedByJob("etl"), tracked)); err != nil {
		f.t.Fatal(err)
	}
	f.reconcile(name)
	f.drain()
	if n := len(d.evictions); n == 0 || d.evictions[n-1].Name != name {
		f.t.Fatalf("evictions %v; want %s evicted", d.evictions, name)
	}
	if evs := f.batchEvents(); len(evs) != 1 || !strings.Contains(evs[0], "deleted pod "+name+" stuck on NodePool spot") || !strings.Contains(evs[0], cost) {
		f.t.Errorf("events %q; want %s deleted, %s", evs, name, cost)
	}
}

// TestIndexedJobRetryPerIndex: under backoffLimitPerIndex the budget is the
// pod's index's: its failures so far (job-index-failure-count) and this
// one against the per-index limit.
func TestIndexedJobRetryPerIndex(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures string
		delete   bool
		want     string
	}{
		{"first failure", "", true, "used retry 1 of backoffLimitPerIndex 1 for index 2"},
		{"index used up", "1", false, "the Job's backoffLimitPerIndex 1 leaves index 2 no retry (1 failed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := job("idx")
			j.Spec.BackoffLimit, j.Spec.BackoffLimitPerIndex, j.Status.Failed = ptr.To[int32](math.MaxInt32), ptr.To[int32](1), 5
			pod := pendingPod("idx-2-x", "spot", now.Add(-4*time.Minute), ownedByJob("idx"),
				withAnnotation(batchv1.JobCompletionIndexAnnotation, "2"))
			if tc.failures != "" {
				pod.Annotations[batchv1.JobIndexFailureCountAnnotation] = tc.failures
			}
			d := &deletions{}
			f := retryFixture(t, d, j, sign(pod))
			f.reconcile("idx-2-x")
			f.drain()
			if _, ok := f.get("idx-2-x"); ok == tc.delete {
				t.Fatalf("exists %v, want deleted %v", ok, tc.delete)
			}
			if evs := f.batchEvents(); len(evs) != 1 || !strings.Contains(evs[0], tc.want) {
				t.Errorf("events %q; want one saying %q", evs, tc.want)
			}
		})
	}
}

// workflow is a Workflow (unstructured: there is no Argo API in Go here)
// whose template shard has retryStrategy rs (none when nil), and whose
// status holds a Retry node of shard with attempts attempts (0: the pod's
// node alone, wf-0, without a Retry node), the last one the pod's.
func workflow(rs map[string]any, attempts int, mutate ...func(spec map[string]any)) *unstructured.Unstructured {
	shard := map[string]any{"name": "shard", "container": map[string]any{"image": "example.com/train:2"}}
	if rs != nil {
		shard["retryStrategy"] = rs
	}
	spec := map[string]any{"entrypoint": "main", "templates": []any{map[string]any{"name": "main"}, shard}}
	for _, m := range mutate {
		m(spec)
	}
	nodes := map[string]any{}
	var children []any
	for i := range max(attempts, 1) {
		id := fmt.Sprintf("wf-%d", i)
		children = append(children, id)
		nodes[id] = map[string]any{"id": id, "type": "Pod", "templateName": "shard", "phase": "Error"}
	}
	nodes[children[len(children)-1].(string)].(map[string]any)["phase"] = "Pending"
	if attempts > 0 {
		nodes["wf-retry"] = map[string]any{"id": "wf-retry", "type": "Retry", "templateName": "shard", "phase": "Running", "children": children}
	}
	wf := &unstructured.Unstructured{Object: map[string]any{"spec": spec, "status": map[string]any{"phase": "Running", "nodes": nodes}}}
	wf.SetGroupVersionKind(workflowGVK)
	wf.SetNamespace("web")
	wf.SetName("wf")
	wf.SetUID("wf-uid")
	return wf
}

// workflowPod is the Workflow's pod of node wf-(attempts-1) (wf-0 when
// attempts is 0), unschedulable on spot for 4 minutes.
func workflowPod(attempts int) *corev1.Pod {
	return pendingPod("wf-step", "spot", now.Add(-4*time.Minute), func(p *corev1.Pod) {
		p.OwnerReferences = test.OwnedBy("argoproj.io/v1alpha1", "Workflow", "wf", "wf-uid")
		p.Annotations[argoNodeIDAnnotation] = fmt.Sprintf("wf-%d", max(attempts, 1)-1)
	})
}

// TestWorkflowPod: Argo does not recreate a Workflow's deleted pod, but a
// step whose retryStrategy retries an errored node (retryPolicy Always or
// OnError) with attempts left runs again with a new pod: only then is the
// stuck pod deleted (past its timeout), with a Normal Event on the
// Workflow naming the retry it used; otherwise it is kept, with a Warning
// Event saying why. Each is counted once.
func TestWorkflowPod(t *testing.T) {
	always := func(limit any) map[string]any {
		rs := map[string]any{"retryPolicy": "Always"}
		if limit != nil {
			rs["limit"] = limit
		}
		return rs
	}
	for _, tc := range []struct {
		name     string
		wf       *unstructured.Unstructured
		attempts int // of the pod's node
		delete   bool
		want     string
	}{
		{"always", workflow(always(int64(2)), 1), 1, true,
			"Normal PendingPodDeleted deleted pod wf-step stuck on NodePool spot, which cannot get capacity, for a new pod in another group: used retry 1 of its step's retryStrategy limit 2"},
		{"on error, limit a string", workflow(map[string]any{"retryPolicy": "OnError", "limit": "3"}, 3), 3, true, "used retry 3 of its step's retryStrategy limit 3"},
		{"no limit", workflow(always(nil), 4), 4, true, "used retry 4 of its step's retryStrategy (no limit)"},
		{"template defaults", workflow(nil, 1, func(spec map[string]any) {
			spec["templateDefaults"] = map[string]any{"retryStrategy": always(int64(1))}
		}), 1, true,
			"used retry 1 of its step's retryStrategy limit 1"},
		{"workflow's retryStrategy", workflow(nil, 1, func(spec map[string]any) { spec["retryStrategy"] = always(int64(1)) }), 1, true,
			"used retry 1 of its step's retryStrategy limit 1"},
		{"limit used up", workflow(always(int64(1)), 2), 2, false, "its retryStrategy's limit 1 is used up (2 attempts)"},
		{"default policy", workflow(map[string]any{"limit": int64(3)}, 1), 1, false, "its retryStrategy's retryPolicy is OnFailure (the default), which does not retry a deleted pod"},
		{"expression", workflow(map[string]any{"retryPolicy": "Always", "limit": int64(3), "expression": "lastRetry.status == 'Error'"}, 1), 1, false,
			"its retryStrategy has an expression"},
		{"limit an expression", workflow(always("{{inputs.parameters.n}}"), 1), 1, false, "its retryStrategy's limit is not a number"},
		{"no retryStrategy", workflow(nil, 0), 0, false,
			"Warning PendingPodKept NodePool spot cannot get capacity; apportion leaves pod wf-step pending there and places the next pods in other groups: " +
				"Argo does not recreate a Workflow's deleted pod, and its step has no retryStrategy that would retry it"},
		{"node unknown", workflow(always(int64(2)), 1), 5, false, "its node is not in the Workflow's status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &deletions{}
			f := retryFixture(t, d, tc.wf, workflowPod(tc.attempts))
			before := retryMetrics()
			exists := f.decideTwice("wf-step")
			if exists == tc.delete || len(d.evictions) != 0 || len(d.deletes) != map[bool]int{true: 1}[tc.delete] {
				t.Fatalf("exists %v, deletes %v, evictions %d; want deleted %v, by a plain delete", exists, d.deletes, len(d.evictions), tc.delete)
			}
			if evs := f.batchEvents(); len(evs) != 1 || !strings.Contains(evs[0], tc.want) {
				t.Errorf("events %q; want one saying %q", evs, tc.want)
			}
			want := map[bool]string{true: resultRetryWorkflow, false: resultKeptWorkflow}[tc.delete]
			if got := grown(before); len(got) != 1 || got[want] != 1 {
				t.Errorf("pods_deleted_total grew by %v, want {%s: 1}", got, want)
			}
		})
	}
}

// TestWorkflowGone: a pod whose Workflow is gone (or replaced) is kept.
func TestWorkflowGone(t *testing.T) {
	d := &deletions{}
	wf := workflow(map[string]any{"retryPolicy": "Always"}, 1)
	wf.SetUID("another-uid")
	f := retryFixture(t, d, wf, workflowPod(1))
	f.reconcile("wf-step")
	f.drain()
	if _, ok := f.get("wf-step"); !ok {
		t.Fatal("the pod of a Workflow gone was deleted")
	}
	if evs := f.batchEvents(); len(evs) != 1 || !strings.Contains(evs[0], "the Workflow is gone") {
		t.Errorf("events %q; want one PendingPodKept saying the Workflow is gone", evs)
	}
}

// TestDeploymentPodDeleted: a ReplicaSet's pod is deleted as before (no
// eviction, no Job read).
func TestDeploymentPodDeleted(t *testing.T) {
	d := &deletions{}
	f := newFixture(t, Options{}, d.funcs(), nil, nodePool("spot", metav1.ConditionFalse), pendingPod("p1", "spot", now.Add(-time.Minute)))
	f.ctrl.opts.APIReader = f.client
	f.reconcile("p1")
	f.drain()
	if _, ok := f.get("p1"); ok || len(d.deletes) != 1 || len(d.evictions) != 0 || d.reads != 0 {
		t.Errorf("exists %v, deletes %v, evictions %d, Job reads %d; want one plain delete", ok, d.deletes, len(d.evictions), d.reads)
	}
	if evs := f.keptEvents(); len(evs) != 0 {
		t.Errorf("PendingPodKept for a Deployment's pod: %q", evs)
	}
}

// TestIgnoresDisruption: the pod as the Job controller will see it once
// evicted (DisruptionTarget=True, its other conditions as they are), the
// first matching rule deciding.
func TestIgnoresDisruption(t *testing.T) {
	pending := pendingPod("p", "spot", now)
	ran := pendingPod("p", "spot", now, func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
	})
	defaulted := ignoreDisruption
	defaulted.OnPodConditions = []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}
	notDisrupted := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse}}}
	failOnDisruption := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob, OnPodConditions: ignoreDisruption.OnPodConditions}
	for _, tc := range []struct {
		name  string
		rules []batchv1.PodFailurePolicyRule
		pod   *corev1.Pod
		want  bool
	}{
		{"ignore", []batchv1.PodFailurePolicyRule{ignoreDisruption}, pending, true},
		{"status defaulted", []batchv1.PodFailurePolicyRule{defaulted}, pending, true},
		{"ignore on False", []batchv1.PodFailurePolicyRule{notDisrupted}, pending, false},
		{"fail first", []batchv1.PodFailurePolicyRule{failOnDisruption, ignoreDisruption}, pending, false},
		{"a container ran", []batchv1.PodFailurePolicyRule{ignoreDisruption}, ran, false},
		{"no rules", nil, pending, false},
	} {
		policy := &batchv1.PodFailurePolicy{Rules: tc.rules}
		if got := ignoresDisruption(policy, tc.pod); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if ignoresDisruption(nil, pending) {
		t.Error("no policy: ignored")
	}
}

// decideTwice reconciles the pod, and again while it exists (a pod is
// decided once), draining the deletion queue each time; it reports whether
// the pod still exists.
func (f *fixture) decideTwice(name string) bool {
	f.t.Helper()
	f.reconcile(name)
	f.drain()
	if _, ok := f.get(name); ok {
		f.reconcile(name)
		f.drain()
	}
	_, exists := f.get(name)
	return exists
}
