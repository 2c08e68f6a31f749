package workload

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
	"github.com/apportion-dev/apportion/pkg/test"
)

func owner(kind, apiVersion, name string, uid types.UID) []metav1.OwnerReference {
	return test.OwnedBy(apiVersion, kind, name, uid)
}

func TestResolve(t *testing.T) {
	scheme := test.Scheme()
	rollout := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "canary", UID: "ro1",
		Annotations: map[string]string{annotations.Strategy: "a=b,weight=1", annotations.Mode: "preferred"}}}
	rollout.SetGroupVersionKind(RolloutGVK)
	cache := memcache.New(scheme)
	if err := cache.Add(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx", UID: "d1",
			Annotations: map[string]string{annotations.LegacyStrategy: "x=y,weight=1", annotations.Skip: "true", annotations.Architectures: "auto"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc", UID: "rs1", OwnerReferences: owner("Deployment", "apps/v1", "nginx", "d1")}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "canary-123", UID: "rs2", OwnerReferences: owner("Rollout", "argoproj.io/v1alpha1", "canary", "ro1")}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "bare", UID: "rs3"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "db", UID: "s1"}},
		rollout,
	); err != nil {
		t.Fatal(err)
	}
	pod := func(ownerRefs []metav1.OwnerReference, labels, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: ownerRefs, Labels: labels, Annotations: ann}}
	}
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		workload  string
		revision  string
		found     bool
		skip      bool
		preferred bool
		archAuto  bool
		ownerKey  string
		err       error
	}{
		{name: "Deployment", pod: pod(owner("ReplicaSet", "apps/v1", "nginx-abc", "rs1"), map[string]string{PodTemplateHashLabel: "abc"}, nil),
			workload: "Deployment web/nginx", revision: "abc", found: true, skip: true, archAuto: true, ownerKey: "rs1"},
		{name: "Argo Rollout", pod: pod(owner("ReplicaSet", "apps/v1", "canary-123", "rs2"), map[string]string{PodTemplateHashLabel: "123"}, nil),
			workload: "Rollout web/canary", revision: "123", found: true, preferred: true, ownerKey: "rs2"},
		{name: "bare ReplicaSet, strategy on the template", pod: pod(owner("ReplicaSet", "apps/v1", "bare", "rs3"), nil, map[string]string{annotations.Strategy: "a=b,weight=1"}),
			workload: "ReplicaSet web/bare", found: true, ownerKey: "rs3"},
		{name: "StatefulSet revision", pod: pod(owner("StatefulSet", "apps/v1", "db", "s1"), map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-7f"}, map[string]string{annotations.Architectures: " Auto "}),
			workload: "StatefulSet web/db", revision: "db-7f", archAuto: true, ownerKey: "s1/db-7f"},
		{name: "ReplicaSet not cached", pod: pod(owner("ReplicaSet", "apps/v1", "new", "rs9"), nil, nil), ownerKey: "rs9", err: ErrNotCached},
		{name: "ReplicaSet not cached, its Deployment is", pod: pod(owner("ReplicaSet", "apps/v1", "nginx-def", "rs8"), map[string]string{PodTemplateHashLabel: "def"}, nil),
			workload: "Deployment web/nginx", revision: "def", found: true, skip: true, archAuto: true, ownerKey: "rs8"},
		{name: "ReplicaSet not cached, its Argo Rollout is", pod: pod(owner("ReplicaSet", "apps/v1", "canary-456", "rs7"), map[string]string{rolloutLabel: "456"}, nil),
			workload: "Rollout web/canary", found: true, preferred: true, ownerKey: "rs7"},
		{name: "ReplicaSet not cached, revision label not its suffix", pod: pod(owner("ReplicaSet", "apps/v1", "nginx-def", "rs8"), map[string]string{PodTemplateHashLabel: "abc"}, nil), ownerKey: "rs8", err: ErrNotCached},
		{name: "owner replaced (other uid)", pod: pod(owner("ReplicaSet", "apps/v1", "nginx-abc", "old"), nil, nil), ownerKey: "old", err: ErrNotCached},
		{name: "Job pod, Job not cached", pod: pod(owner("Job", "batch/v1", "j", "j1"), nil, nil), ownerKey: "j1", err: ErrNotCached},
		{name: "Job of another group: not followed", pod: pod(owner("Job", "example.com/v1", "j", "j1"), nil, nil)},
		// Same kind, other API group: OpenKruise's Advanced StatefulSet and
		// CloneSet-made ReplicaSet look-alikes are not followed.
		{name: "OpenKruise StatefulSet: not followed", pod: pod(owner("StatefulSet", "apps.kruise.io/v1beta1", "db", "s1"), map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-7f"}, nil)},
		{name: "ReplicaSet of another group: not followed", pod: pod(owner("ReplicaSet", "example.com/v1", "nginx-abc", "rs1"), nil, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Resolve(context.Background(), client.Reader(cache), "web", tc.pod)
			if got := OwnerKey(tc.pod); got != tc.ownerKey {
				t.Errorf("OwnerKey = %q, want %q", got, tc.ownerKey)
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.workload == "" {
				if info != nil {
					t.Fatalf("info = %+v, want nil", info)
				}
				return
			}
			if info.Workload.String() != tc.workload || info.Revision != tc.revision || info.Found != tc.found || info.Skip != tc.skip || info.Preferred() != tc.preferred || info.ArchitecturesAuto != tc.archAuto {
				t.Errorf("info = %+v (%s)", info, info.Workload)
			}
		})
	}
}

func meta(gvk schema.GroupVersionKind, name string, uid types.UID, ann map[string]string, owners []metav1.OwnerReference) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: name, UID: uid, Annotations: ann, OwnerReferences: owners}}
	m.SetGroupVersionKind(gvk)
	return m
}

// TestResolveBatch: a Job's pod, a CronJob's Job's pod and a Workflow's pod
// are each counted under their own owner's UID, and their strategy comes
// from the pod (template or Argo's podMetadata), then the Job or Workflow,
// then the CronJob, then a policy of the Job, then one of the CronJob.
func TestResolveBatch(t *testing.T) {
	withStrategy := func(v string) map[string]string { return map[string]string{annotations.Strategy: v} }
	cache := memcache.New(test.Scheme())
	if err := cache.Add(
		meta(JobGVK, "plain", "j0", nil, nil),
		meta(JobGVK, "annotated", "j1", map[string]string{annotations.Strategy: "job=1,weight=1", annotations.Mode: "preferred"}, nil),
		meta(CronJobGVK, "nightly", "c1", map[string]string{annotations.Strategy: "cron=1,weight=1", annotations.Mode: "shadow", annotations.CapacityTimeout: "3m"}, nil),
		meta(JobGVK, "nightly-100", "j2", nil, owner("CronJob", "batch/v1", "nightly", "c1")),
		meta(JobGVK, "nightly-101", "j3", withStrategy("copied=1,weight=1"), owner("CronJob", "batch/v1", "nightly", "c1")),
		meta(CronJobGVK, "bare", "c2", nil, nil),
		meta(JobGVK, "bare-1", "j4", nil, owner("CronJob", "batch/v1", "bare", "c2")),
		meta(WorkflowGVK, "etl", "w1", withStrategy("wf=1,weight=1"), nil),
		meta(JobGVK, "gone-parent", "j5", nil, owner("CronJob", "batch/v1", "deleted", "c9")),
	); err != nil {
		t.Fatal(err)
	}
	policies := fakePolicies{"plain": "policy-job=1,weight=1", "bare": "policy-cron=1,weight=1"}
	pod := func(kind, apiVersion, name string, uid types.UID, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: owner(kind, apiVersion, name, uid), Annotations: ann}}
	}
	for _, tc := range []struct {
		name, workload, parent, strategy, source, mode, timeout, ownerKey string
		pod                                                               *corev1.Pod
		err                                                               error
	}{
		{name: "Job, from a policy of the Job", pod: pod("Job", "batch/v1", "plain", "j0", nil),
			workload: "Job batch/plain", strategy: "policy-job=1,weight=1", source: "PlacementPolicy batch/p-plain", mode: "preferred", ownerKey: "j0"},
		{name: "Job, its annotation", pod: pod("Job", "batch/v1", "annotated", "j1", nil),
			workload: "Job batch/annotated", strategy: "job=1,weight=1", source: "metadata.annotations[apportion.dev/strategy]", mode: "preferred", ownerKey: "j1"},
		{name: "Job, the pod template wins", pod: pod("Job", "batch/v1", "annotated", "j1", map[string]string{annotations.Strategy: "pod=1,weight=1", annotations.Mode: "required"}),
			workload: "Job batch/annotated", strategy: "pod=1,weight=1", source: "spec.template.metadata.annotations[apportion.dev/strategy]", mode: "required", ownerKey: "j1"},
		{name: "CronJob's Job, from the CronJob", pod: pod("Job", "batch/v1", "nightly-100", "j2", nil),
			workload: "Job batch/nightly-100", parent: "CronJob batch/nightly", strategy: "cron=1,weight=1",
			source: "CronJob nightly metadata.annotations[apportion.dev/strategy]", mode: "shadow", timeout: "3m", ownerKey: "j2"},
		{name: "CronJob's Job, its jobTemplate's annotation copied onto the Job wins", pod: pod("Job", "batch/v1", "nightly-101", "j3", nil),
			workload: "Job batch/nightly-101", parent: "CronJob batch/nightly", strategy: "copied=1,weight=1",
			source: "metadata.annotations[apportion.dev/strategy]", mode: "shadow", timeout: "3m", ownerKey: "j3"},
		{name: "CronJob's Job, from a policy of the CronJob", pod: pod("Job", "batch/v1", "bare-1", "j4", nil),
			workload: "Job batch/bare-1", parent: "CronJob batch/bare", strategy: "policy-cron=1,weight=1", source: "PlacementPolicy batch/p-bare", mode: "preferred", ownerKey: "j4"},
		{name: "CronJob not cached", pod: pod("Job", "batch/v1", "gone-parent", "j5", nil), ownerKey: "j5", err: ErrNotCached},
		{name: "Workflow pod, from the Workflow", pod: pod("Workflow", "argoproj.io/v1alpha1", "etl", "w1", nil),
			workload: "Workflow batch/etl", strategy: "wf=1,weight=1", source: "metadata.annotations[apportion.dev/strategy]", mode: "required", ownerKey: "w1"},
		{name: "Workflow pod, Argo's podMetadata on the pod wins", pod: pod("Workflow", "argoproj.io/v1alpha1", "etl", "w1", withStrategy("pm=1,weight=1")),
			workload: "Workflow batch/etl", strategy: "pm=1,weight=1", source: "spec.template.metadata.annotations[apportion.dev/strategy]", mode: "required", ownerKey: "w1"},
		{name: "Workflow of another group: not followed", pod: pod("Workflow", "example.com/v1", "etl", "w1", nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OwnerKey(tc.pod); got != tc.ownerKey {
				t.Errorf("OwnerKey = %q, want %q", got, tc.ownerKey)
			}
			if got := IsBatch(tc.pod); got != (tc.ownerKey != "") {
				t.Errorf("IsBatch = %v", got)
			}
			info, err := Resolve(context.Background(), client.Reader(cache), "batch", tc.pod, WithPolicies(policies))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.workload == "" {
				if info != nil {
					t.Fatalf("info = %+v, want nil", info)
				}
				return
			}
			parent := ""
			if info.Parent.Kind != "" {
				parent = info.Parent.String()
			}
			if info.Workload.String() != tc.workload || parent != tc.parent || info.Revision != "" || !info.Found ||
				info.Strategy != tc.strategy || info.Source.String() != tc.source || info.Mode != tc.mode || info.CapacityTimeout != tc.timeout {
				t.Errorf("info = %+v (%s, from %s)", info, info.Workload, info.Source)
			}
		})
	}
}

type fakePolicies map[string]string // workload name -> strategy

func (f fakePolicies) Candidates(_ context.Context, namespace string, top *metav1.PartialObjectMetadata) ([]Policy, error) {
	raw, ok := f[top.Name]
	if !ok {
		return nil, nil
	}
	return []Policy{{Strategy: raw, Mode: annotations.ModePreferred, Name: namespace + "/p-" + top.Name}}, nil
}

// TestResolveWithPolicies: a workload without a strategy annotation gets the
// policy's; an annotation wins over a policy.
func TestResolveWithPolicies(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = appsv1.AddToScheme(scheme)
	cache := memcache.New(scheme)
	if err := cache.Add(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "plain", UID: "d1"}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "plain-1", UID: "rs1", OwnerReferences: owner("Deployment", "apps/v1", "plain", "d1")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "annotated", UID: "d2", Annotations: map[string]string{annotations.Strategy: "a=b,weight=1"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "annotated-1", UID: "rs2", OwnerReferences: owner("Deployment", "apps/v1", "annotated", "d2")}},
	); err != nil {
		t.Fatal(err)
	}
	policies := fakePolicies{"plain": "x=y,weight=1", "annotated": "x=y,weight=1"}
	pod := func(rs string, uid types.UID) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: owner("ReplicaSet", "apps/v1", rs, uid)}}
	}
	info, err := Resolve(context.Background(), cache, "web", pod("plain-1", "rs1"), WithPolicies(policies))
	if err != nil || !info.Found || info.Strategy != "x=y,weight=1" || !info.Preferred() || info.Source.String() != "PlacementPolicy web/p-plain" {
		t.Fatalf("policy: %+v, %v", info, err)
	}
	info, err = Resolve(context.Background(), cache, "web", pod("annotated-1", "rs2"), WithPolicies(policies))
	if err != nil || info.Strategy != "a=b,weight=1" || info.Source.Policy != "" {
		t.Fatalf("annotation must win: %+v, %v", info, err)
	}
	if info, _ := Resolve(context.Background(), cache, "web", pod("plain-1", "rs1")); info.Found {
		t.Fatalf("without WithPolicies: %+v", info)
	}
}

type modePolicy string // the mode of a policy that targets every workload

func (m modePolicy) Candidates(_ context.Context, namespace string, _ *metav1.PartialObjectMetadata) ([]Policy, error) {
	return []Policy{{Strategy: "x=y,weight=1", Mode: string(m), Name: namespace + "/p"}}, nil
}

// TestModePrecedence: the pod template's apportion.dev/mode wins over the
// workload's, which wins over the PlacementPolicy's spec.mode, which wins
// over the default (WithDefaultMode, required when not given); values out
// of range are passed over.
func TestModePrecedence(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = appsv1.AddToScheme(scheme)
	for _, tc := range []struct {
		name                       string
		template, workload, policy string
		defaultMode                string
		noPolicy                   bool
		want                       string
		wantPreferred, wantShadow  bool
	}{
		{name: "nothing: required", noPolicy: true, want: "required"},
		{name: "default shadow", noPolicy: true, defaultMode: "shadow", want: "shadow", wantShadow: true},
		{name: "default out of range: required", noPolicy: true, defaultMode: "dry", want: "required"},
		{name: "policy over default", policy: "preferred", defaultMode: "shadow", want: "preferred", wantPreferred: true},
		{name: "policy without a mode: default", policy: "", defaultMode: "shadow", want: "shadow", wantShadow: true},
		{name: "workload over policy", workload: "shadow", policy: "preferred", want: "shadow", wantShadow: true},
		{name: "workload over default", workload: "required", noPolicy: true, defaultMode: "shadow", want: "required"},
		{name: "template over workload", template: " Shadow ", workload: "required", policy: "preferred", defaultMode: "required", want: "shadow", wantShadow: true},
		{name: "template required over a shadow default", template: "required", noPolicy: true, defaultMode: "shadow", want: "required"},
		{name: "template out of range: workload's", template: "shdow", workload: "preferred", noPolicy: true, defaultMode: "shadow", want: "preferred", wantPreferred: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "d", UID: "d1"}}
			if tc.workload != "" {
				dep.Annotations = map[string]string{annotations.Mode: tc.workload}
			}
			if tc.noPolicy {
				dep.Annotations = mergeAnn(dep.Annotations, annotations.Strategy, "a=b,weight=1")
			}
			cache := memcache.New(scheme)
			if err := cache.Add(dep, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "d-1", UID: "rs1", OwnerReferences: owner("Deployment", "apps/v1", "d", "d1")}}); err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: owner("ReplicaSet", "apps/v1", "d-1", "rs1")}}
			if tc.template != "" {
				pod.Annotations = map[string]string{annotations.Mode: tc.template}
			}
			opts := []Option{WithDefaultMode(tc.defaultMode)}
			if !tc.noPolicy {
				opts = append(opts, WithPolicies(modePolicy(tc.policy)))
			}
			info, err := Resolve(context.Background(), cache, "web", pod, opts...)
			if err != nil || info == nil || !info.Found {
				t.Fatalf("Resolve = %+v, %v", info, err)
			}
			if info.Mode != tc.want || info.Preferred() != tc.wantPreferred || info.Shadow() != tc.wantShadow {
				t.Errorf("mode %q preferred %v shadow %v, want %q %v %v", info.Mode, info.Preferred(), info.Shadow(), tc.want, tc.wantPreferred, tc.wantShadow)
			}
		})
	}
}

func mergeAnn(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

func TestOwnerKindsByGroup(t *testing.T) {
	for _, tc := range []struct {
		kind, apiVersion    string
		daemonSet, recreate bool
	}{
		{"DaemonSet", "apps/v1", true, false},
		{"DaemonSet", "apps.kruise.io/v1alpha1", false, false},
		{"ReplicaSet", "apps/v1", false, true},
		{"StatefulSet", "apps/v1", false, true},
		{"StatefulSet", "apps.kruise.io/v1beta1", false, false},
		{"ReplicaSet", "v1", false, false},
		{"ReplicaSet", "not/a/version", false, false},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: owner(tc.kind, tc.apiVersion, "x", "u1")}}
		if got := IsDaemonSetPod(pod); got != tc.daemonSet {
			t.Errorf("%s %s: IsDaemonSetPod = %v, want %v", tc.apiVersion, tc.kind, got, tc.daemonSet)
		}
		if got := Recreated(pod); got != tc.recreate {
			t.Errorf("%s %s: Recreated = %v, want %v", tc.apiVersion, tc.kind, got, tc.recreate)
		}
	}
}
