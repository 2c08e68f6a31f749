package fallback

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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

// TestJobPodKept: without a rule that ignores DisruptionTarget (no policy,
// a policy that counts it, an Ignore rule after one that matches first, a
// Job another controller manages, a Job gone), a deleted pod would count
// against the Job's backoffLimit: the pod stays, its Job gets one Warning
// Event that says what to add, and the pod is counted once as kept_job.
func TestJobPodKept(t *testing.T) {
	countFirst := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionCount,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}}}
	failOnExit := batchv1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}}
	elsewhere := job("etl", ignoreDisruption)
	elsewhere.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
	for _, tc := range []struct {
		name string
		job  *batchv1.Job
		want string
	}{
		{"no policy", job("etl"), "{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}"},
		{"exit codes only", job("etl", failOnExit), "against its backoffLimit"},
		{"counted first", job("etl", countFirst, ignoreDisruption), "against its backoffLimit"},
		{"managed elsewhere", elsewhere, `managed by "kueue.x-k8s.io/multikueue"`},
		{"gone", job("other"), "the Job is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &deletions{}
			f := newFixture(t, Options{}, d.funcs(), nil, nodePool("spot", metav1.ConditionFalse), tc.job,
				pendingPod("etl-1", "spot", now.Add(-time.Minute), ownedByJob("etl")))
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

// TestWorkflowPodKept: Argo does not recreate a Workflow's deleted pod, so
// it is never deleted, whatever the Workflow says; its Workflow is told.
func TestWorkflowPodKept(t *testing.T) {
	d := &deletions{}
	f := newFixture(t, Options{}, d.funcs(), nil, nodePool("spot", metav1.ConditionFalse),
		pendingPod("wf-step", "spot", now.Add(-time.Minute), func(p *corev1.Pod) {
			p.OwnerReferences = test.OwnedBy("argoproj.io/v1alpha1", "Workflow", "wf", "wf-uid")
		}))
	f.ctrl.opts.APIReader = f.client
	kept := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultKeptWorkflow))

	f.reconcile("wf-step")
	f.drain()
	if _, ok := f.get("wf-step"); !ok || len(d.deletes)+len(d.evictions) != 0 {
		t.Fatalf("exists %v, deletes %v, evictions %d; want the Workflow's pod kept", ok, d.deletes, len(d.evictions))
	}
	evs := f.keptEvents()
	if len(evs) != 1 || !strings.Contains(evs[0], "Argo does not recreate a Workflow's deleted pod") {
		t.Errorf("events %q; want one PendingPodKept", evs)
	}
	if got := testutil.ToFloat64(metrics.CapacityPodsDeletedTotal.WithLabelValues(resultKeptWorkflow)) - kept; got != 1 {
		t.Errorf("pods_deleted_total{result=kept_workflow} grew by %v, want 1", got)
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
