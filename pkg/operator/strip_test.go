package operator

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/podcache"
)

// cached is pod through the informer's transform, as a Get from the cache
// gives it out (a deep copy of the stored object).
func cached(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	obj, err := StripPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	out, ok := obj.(runtime.Object).DeepCopyObject().(*corev1.Pod)
	if !ok {
		t.Fatalf("the cached %T copies to %T", obj, out)
	}
	return out
}

// TestStripPodKeepsImagesOfGatedPodsOnly: the informer keeps what placement
// reads. A gated pod keeps its images, pull policies, pull secrets and
// ServiceAccount (image inspection needs them); a placed pod keeps none.
func TestStripPodKeepsImagesOfGatedPodsOnly(t *testing.T) {
	pod := func(gated bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{
				annotations.Architectures: "auto", "kubectl.kubernetes.io/last-applied-configuration": "{...}"}},
			Spec: corev1.PodSpec{
				ServiceAccountName: "builder",
				ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "regcred"}},
				InitContainers:     []corev1.Container{{Name: "init", Image: "busybox:1", Command: []string{"true"}}},
				Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1", ImagePullPolicy: corev1.PullAlways,
					Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
				Volumes: []corev1.Volume{{Name: "v"}},
			},
		}
		if gated {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
		}
		return p
	}
	gated := cached(t, pod(true))
	if len(gated.Spec.Containers) != 1 || gated.Spec.Containers[0].Image != "example.com/app:1" || gated.Spec.Containers[0].ImagePullPolicy != corev1.PullAlways ||
		gated.Spec.Containers[0].Env != nil || len(gated.Spec.InitContainers) != 1 || gated.Spec.InitContainers[0].Command != nil ||
		gated.Spec.ServiceAccountName != "builder" || len(gated.Spec.ImagePullSecrets) != 1 || gated.Spec.Volumes != nil {
		t.Errorf("gated pod stripped to %+v", gated.Spec)
	}
	if gated.Annotations[annotations.Architectures] != "auto" || len(gated.Annotations) != 1 {
		t.Errorf("annotations kept: %v", gated.Annotations)
	}
	placed := cached(t, pod(false))
	if placed.Spec.Containers != nil || placed.Spec.InitContainers != nil || placed.Spec.ImagePullSecrets != nil || placed.Spec.ServiceAccountName != "" {
		t.Errorf("placed pod stripped to %+v", placed.Spec)
	}
}

// TestStripPodKeepsPodScheduledOfUnboundPods: capacity fallback needs since
// when an unbound pod is unschedulable; a bound pod keeps no condition.
func TestStripPodKeepsPodScheduledOfUnboundPods(t *testing.T) {
	since := metav1.Now()
	conds := []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionFalse},
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes...", LastTransitionTime: since},
	}
	got := cached(t, &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: conds}}).Status.Conditions
	if len(got) != 1 || got[0].Type != corev1.PodScheduled || got[0].Reason != corev1.PodReasonUnschedulable || !got[0].LastTransitionTime.Equal(&since) || got[0].Message != "" {
		t.Errorf("unbound pod conditions = %+v", got)
	}
	if got := cached(t, &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: conds}}).Status.Conditions; got != nil {
		t.Errorf("bound pod conditions = %+v", got)
	}
}

// TestEveryCacheDropsManagedFieldsAndLastApplied: workloads, Namespaces
// and Nodes are cached as metadata; Rollouts and NodePools typed or not:
// none keeps managedFields or kubectl's last-applied configuration, and
// every object cached with its own options has a transform too.
func TestEveryCacheDropsManagedFieldsAndLastApplied(t *testing.T) {
	opts := CacheOptions(&options.Options{SystemNamespace: "apportion-system", LeaderElectionID: "apportion"})
	big := strings.Repeat("x", 64<<10)
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "n", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: big, annotations.Strategy: "a=b,weight=1"}}
	}
	deploy := &metav1.PartialObjectMetadata{ObjectMeta: meta()}
	deploy.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	for _, obj := range []client.Object{deploy, &corev1.Node{ObjectMeta: meta()}, &corev1.Namespace{ObjectMeta: meta()},
		&appsv1.ReplicaSet{ObjectMeta: meta()}, &karpv1.NodePool{ObjectMeta: meta()}} {
		out, err := opts.DefaultTransform(obj)
		if err != nil {
			t.Fatal(err)
		}
		m := out.(metav1.Object)
		if m.GetManagedFields() != nil || m.GetAnnotations()[corev1.LastAppliedConfigAnnotation] != "" {
			t.Errorf("%T: managedFields %v, last-applied kept: %v", obj, m.GetManagedFields(), len(m.GetAnnotations()[corev1.LastAppliedConfigAnnotation]))
		}
		if m.GetAnnotations()[annotations.Strategy] == "" {
			t.Errorf("%T: the strategy annotation was dropped", obj)
		}
	}
	for obj, by := range opts.ByObject {
		if by.Transform == nil {
			t.Errorf("%T is cached with its own options but no transform", obj)
		}
	}
}

// TestWorkloadsCachedSmall: the typed workload caches (PlacementPolicy
// status) keep replicas and pod template annotations only; the metadata
// caches of the same kinds, which share the options, are stripped too.
func TestWorkloadsCachedSmall(t *testing.T) {
	opts := CacheOptions(&options.Options{SystemNamespace: "apportion-system", LeaderElectionID: "apportion"})
	replicas := int32(7)
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}, Annotations: map[string]string{annotations.Strategy: "a=b,weight=1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1", Env: []corev1.EnvVar{{Name: "A", Value: strings.Repeat("x", 1024)}}}}}}
	meta := metav1.ObjectMeta{Name: "w", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}, Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: "{}"}}
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: tmpl}, Status: appsv1.DeploymentStatus{Replicas: 7}},
		&appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Template: tmpl}},
		&appsv1.ReplicaSet{ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, Template: tmpl}},
	} {
		var by cache.ByObject
		ok := false
		for k, v := range opts.ByObject {
			if fmt.Sprintf("%T", k) == fmt.Sprintf("%T", obj) {
				by, ok = v, true
			}
		}
		if !ok || by.Transform == nil {
			t.Fatalf("%T: no transform", obj)
		}
		out, err := by.Transform(obj.DeepCopyObject())
		if err != nil {
			t.Fatal(err)
		}
		var spec struct {
			replicas int32
			tmpl     corev1.PodTemplateSpec
		}
		switch o := out.(type) {
		case *appsv1.Deployment:
			spec.replicas, spec.tmpl = *o.Spec.Replicas, o.Spec.Template
			if o.Status.Replicas != 0 {
				t.Errorf("Deployment status kept")
			}
		case *appsv1.StatefulSet:
			spec.replicas, spec.tmpl = *o.Spec.Replicas, o.Spec.Template
		case *appsv1.ReplicaSet:
			spec.replicas, spec.tmpl = *o.Spec.Replicas, o.Spec.Template
		}
		m := out.(metav1.Object)
		if spec.replicas != 7 || spec.tmpl.Annotations[annotations.Strategy] == "" || len(spec.tmpl.Spec.Containers) != 0 || spec.tmpl.Labels != nil ||
			m.GetManagedFields() != nil || m.GetAnnotations()[corev1.LastAppliedConfigAnnotation] != "" {
			t.Errorf("%T cached as %+v", obj, out)
		}
	}
	deploy := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "d", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}}}
	if out, err := StripWorkload(deploy); err != nil || out.(metav1.Object).GetManagedFields() != nil {
		t.Errorf("metadata-only workload: %v %+v", err, out)
	}
}

// TestCachedPodIsTheStrippedPod: what the cache gives out of its compact
// pods (a Get's deep copy, a handler's View) is the stripped pod, field for
// field, for pods with every field set: placed, and gated and unbound. A
// field stripPod keeps that podcache does not carry fails here.
func TestCachedPodIsTheStrippedPod(t *testing.T) {
	full := func(gated bool) *corev1.Pod {
		pod := &corev1.Pod{}
		n := 0
		fillAll(reflect.ValueOf(pod).Elem(), 4, &n)
		for _, k := range append(keptAnnotations, annotations.Signature, corev1.PodDeletionCost) {
			pod.Annotations[k] = "value of " + k
		}
		if gated {
			pod.Spec.NodeName = ""
			pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: annotations.PlacementGate})
			pod.Status.Conditions[0].Type = corev1.PodScheduled
		}
		return pod
	}
	for _, gated := range []bool{false, true} {
		want := stripPod(full(gated))
		if gated && (want.Spec.Containers == nil || want.Status.Conditions == nil) || want.Spec.Affinity == nil || len(want.Annotations) < 3 {
			t.Fatalf("gated=%v: the fixture lacks fields: %+v", gated, want)
		}
		obj, err := StripPod(full(gated))
		if err != nil {
			t.Fatal(err)
		}
		view, ok := podcache.View(obj)
		if !ok || !equality.Semantic.DeepEqual(view, want) {
			t.Errorf("gated=%v: view differs from the stripped pod:\n%v", gated, diff.Diff(want, view))
		}
		got := obj.(runtime.Object).DeepCopyObject().(*corev1.Pod)
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("gated=%v: copy differs from the stripped pod:\n%v", gated, diff.Diff(want, got))
		}
		// The copy is the caller's: changing it leaves the cache as it was.
		got.Labels["changed"], got.Annotations["changed"] = "yes", "yes"
		got.Spec.Affinity.NodeAffinity = nil
		got.OwnerReferences[0].Name = "changed"
		if view, _ := podcache.View(obj); !equality.Semantic.DeepEqual(view, want) {
			t.Errorf("gated=%v: changing a copy changed the cache:\n%v", gated, diff.Diff(want, view))
		}
	}
}

// fillAll sets every exported field under v, depth levels of pointers,
// slices and maps deep, each string to a value of its own.
func fillAll(v reflect.Value, depth int, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("v%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n % 100))
	case reflect.Pointer:
		if depth > 0 {
			v.Set(reflect.New(v.Type().Elem()))
			fillAll(v.Elem(), depth-1, n)
		}
	case reflect.Slice:
		if depth > 0 {
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
			for i := range 2 {
				fillAll(v.Index(i), depth-1, n)
			}
		}
	case reflect.Map:
		if depth > 0 {
			v.Set(reflect.MakeMap(v.Type()))
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fillAll(k, depth-1, n)
			fillAll(e, depth-1, n)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillAll(v.Field(i), depth, n)
			}
		}
	}
}

// TestStripPodKeepsSecondCostWriters: of managedFields the cache keeps only
// a deletion cost written after the pod's creation by a manager other than
// apportion, so that the deletion-cost controller can name it; the cached
// pod gives the same writer as the pod it came from.
func TestStripPodKeepsSecondCostWriters(t *testing.T) {
	created := metav1.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	later := metav1.NewTime(created.Add(time.Minute))
	entry := func(manager string, at metav1.Time, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &at,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
	}
	const cost = `{"f:metadata":{"f:annotations":{"f:controller.kubernetes.io/pod-deletion-cost":{}}}}`
	const labels = `{"f:metadata":{"f:labels":{"f:app":{}}}}`
	cases := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		writer  string
	}{
		{"none", nil, ""},
		{"the template's cost, at creation", []metav1.ManagedFieldsEntry{entry("kube-controller-manager", created, cost)}, ""},
		{"apportion's cost", []metav1.ManagedFieldsEntry{entry("kube-controller-manager", created, labels), entry(decision.FieldManager, later, cost)}, ""},
		{"karpenter's cost", []metav1.ManagedFieldsEntry{entry("kube-controller-manager", created, labels), entry("karpenter", later, cost)}, "karpenter"},
		{"another field", []metav1.ManagedFieldsEntry{entry("karpenter", later, labels)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", CreationTimestamp: created,
				Annotations: map[string]string{corev1.PodDeletionCost: "3"}, ManagedFields: tc.entries}}
			if got := decision.CostWriter(pod); got != tc.writer {
				t.Fatalf("the pod's writer is %q, want %q", got, tc.writer)
			}
			out := cached(t, pod.DeepCopy())
			if got := decision.CostWriter(out); got != tc.writer {
				t.Errorf("the cached pod's writer is %q, want %q (managedFields %+v)", got, tc.writer, out.ManagedFields)
			}
			if tc.writer == "" && out.ManagedFields != nil {
				t.Errorf("the cache kept managedFields %+v", out.ManagedFields)
			}
		})
	}
}

// TestStripPodCompactsTheShadowDecision: the cache keeps of a pod's
// apportion.dev/shadow annotation what the tally reads (group, NodePool,
// signature), and the signature still verifies.
func TestStripPodCompactsTheShadowDecision(t *testing.T) {
	signer := decision.RandomSigner()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "p", UID: "p-uid"}}
	sh := decision.Shadow{Group: "karpenter.sh/capacity-type=spot", NodePool: "spot", Architectures: []string{"amd64", "arm64"},
		Record: &decision.Record{Strategy: "abc", Revision: "r", Counts: []int64{3, 9}, Reason: "quota"}}
	sh.Signature = signer.SignShadow(pod.UID, sh.Group, sh.NodePool)
	decision.WriteShadow(pod, sh)
	full := pod.Annotations[annotations.Shadow]
	got := cached(t, pod)
	kept := got.Annotations[annotations.Shadow]
	if kept == "" || len(kept) >= len(full) || strings.Contains(kept, "record") || strings.Contains(kept, "arm64") {
		t.Errorf("cached shadow annotation %q (from %q)", kept, full)
	}
	if v, ok := signer.ReadShadow(got); !ok || v.Group != sh.Group || v.NodePool != "spot" {
		t.Errorf("the cached shadow decision reads %+v, %v", v, ok)
	}
}

// TestStripEventKeepsTheOwnPoolsPart: on a cluster of many NodePools,
// Karpenter's FailedScheduling lists a requirements mismatch for every
// other pool before the part about the pod's own (a low-weight pool comes
// last). The cached message, bounded, still holds that part, so fallback
// reads the same finding as from the whole message.
func TestStripEventKeepsTheOwnPoolsPart(t *testing.T) {
	parts := []string{}
	for i := range 60 {
		parts = append(parts, fmt.Sprintf(`incompatible with nodepool "pool-%02d", daemonset overhead={"cpu":"100m","pods":"1"}, `+
			`incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [own] not in karpenter.sh/nodepool In [pool-%02d]; `+
			`key e2e.example/case, e2e.example/case In [a] not in e2e.example/case In [b]`, i, i))
	}
	for _, own := range []struct {
		part string
		want capacity.Finding
	}{
		{`no instance type has enough resources, requirements=karpenter.sh/nodepool In [own], resources={"cpu":"500"}`, capacity.FindingDoesNotFit},
		{`all available instance types exceed limits for nodepool (NodePool=own)`, capacity.FindingLimits},
	} {
		msg := "Failed to schedule pod, " + strings.Join(append(parts, own.part), "; ")
		if len(msg) <= maxEventMessage {
			t.Fatalf("the message (%d bytes) must exceed the bound (%d) for the case", len(msg), maxEventMessage)
		}
		if got := capacity.ReadFailedScheduling(msg, "own").Finding; got != own.want {
			t.Fatalf("the whole message reads %v, want %v", got, own.want)
		}
		out, err := StripEvent(&corev1.Event{Reason: "FailedScheduling", Message: msg})
		if err != nil {
			t.Fatal(err)
		}
		kept := out.(*corev1.Event).Message
		if len(kept) > maxEventMessage {
			t.Fatalf("cached message of %d bytes, over the bound %d", len(kept), maxEventMessage)
		}
		if got := capacity.ReadFailedScheduling(kept, "own").Finding; got != own.want {
			t.Fatalf("the cached message reads %v, want %v: %q", got, own.want, kept)
		}
	}
}
