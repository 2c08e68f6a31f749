package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/profiles"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

type alive bool

func (a alive) Alive(context.Context) bool { return bool(a) }

const good = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

func newMutator(t testing.TB, leader bool, deployAnnotations map[string]string, extra ...client.Object) *PodMutator {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := appsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx", UID: "d1", Annotations: deployAnnotations}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc", UID: "rs1", OwnerReferences: test.OwnedBy("apps/v1", "Deployment", "nginx", "d1")}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "db", UID: "s1", Annotations: map[string]string{annotations.Strategy: good}}},
	}
	return &PodMutator{
		Reader:   fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, extra...)...).Build(),
		Leader:   alive(leader),
		Recorder: events.NewFakeRecorder(10),
		Excluded: sets.New("kube-system"),
	}
}

func rsPod(mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "nginx-abc-", Labels: map[string]string{"pod-template-hash": "abc"},
			OwnerReferences: test.OwnedBy("apps/v1", "ReplicaSet", "nginx-abc", "rs1")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func request(t testing.TB, namespace string, pod *corev1.Pod) admission.Request {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "u", Operation: admissionv1.Create, Namespace: namespace,
		Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Object: runtime.RawExtension{Raw: raw},
	}}
}

func TestPodMutator(t *testing.T) {
	gatePatch := `[{"op":"add","path":"/spec/schedulingGates","value":[{"name":"apportion.dev/placement"}]}]`
	for _, tc := range []struct {
		name        string
		leader      bool
		deployAnn   map[string]string
		namespace   string
		pod         *corev1.Pod
		wantPatch   string // "" means admitted unchanged
		wantWarned  bool
		defaultMode string
	}{
		{name: "strategy on the Deployment: gated", leader: true, deployAnn: map[string]string{annotations.LegacyStrategy: good}, pod: rsPod(), wantPatch: gatePatch},
		{name: "strategy on the pod template: gated", leader: true, pod: rsPod(func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Strategy: good} }), wantPatch: gatePatch},
		{name: "StatefulSet pod: gated", leader: true, pod: rsPod(func(p *corev1.Pod) {
			p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "StatefulSet", "db", "s1"
		}), wantPatch: gatePatch},
		{name: "ReplicaSet not cached yet: gated, the controller decides", leader: true, pod: rsPod(func(p *corev1.Pod) {
			p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "nginx-new", "rs2"
		}), wantPatch: gatePatch},
		{name: "no strategy", leader: true, pod: rsPod()},
		{name: "no leader alive", leader: false, deployAnn: map[string]string{annotations.Strategy: good}, pod: rsPod()},
		{name: "invalid strategy: warning, unchanged", leader: true, deployAnn: map[string]string{annotations.Strategy: "a=b,weight=x"}, pod: rsPod(), wantWarned: true},
		{name: "excluded namespace", leader: true, namespace: "kube-system", deployAnn: map[string]string{annotations.Strategy: good}, pod: rsPod()},
		{name: "opted out pod", leader: true, deployAnn: map[string]string{annotations.Strategy: good}, pod: rsPod(func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Skip: "true"} })},
		{name: "opted out workload", leader: true, deployAnn: map[string]string{annotations.Strategy: good, annotations.Skip: "true"}, pod: rsPod()},
		{name: "DaemonSet pod", leader: true, pod: rsPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.Strategy: good}
			p.OwnerReferences[0].Kind = "DaemonSet"
		})},
		{name: "mirror pod", leader: true, pod: rsPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.Strategy: good, corev1.MirrorPodAnnotationKey: "x"}
		})},
		{name: "pod with nodeName", leader: true, deployAnn: map[string]string{annotations.Strategy: good}, pod: rsPod(func(p *corev1.Pod) { p.Spec.NodeName = "n1" })},
		{name: "client-written decision: removed, then gated", leader: true, deployAnn: map[string]string{annotations.Strategy: good}, pod: rsPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.Group: "karpenter.sh/capacity-type=spot", annotations.Fallback: "x", "team": "a"}
		}), wantPatch: `[{"op":"remove","path":"/metadata/annotations/apportion.dev~1group"},{"op":"remove","path":"/metadata/annotations/apportion.dev~1fallback"},` + gatePatch[1:], wantWarned: true},
		{name: "client-written decision without a strategy: removed, not gated", leader: true, pod: rsPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.NodePool: "od", annotations.Decision: "{}", annotations.Signature: "forged"}
		}), wantPatch: `[{"op":"remove","path":"/metadata/annotations/apportion.dev~1nodepool"},{"op":"remove","path":"/metadata/annotations/apportion.dev~1decision"},{"op":"remove","path":"/metadata/annotations/apportion.dev~1signature"}]`, wantWarned: true},
		{name: "decision annotations in an excluded namespace: untouched", leader: true, namespace: "kube-system", pod: rsPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.Group: "karpenter.sh/capacity-type=spot"}
		})},
		// Same kind as apps/v1, another API group: not followed, so not
		// held for the gate timeout.
		{name: "OpenKruise StatefulSet pod: not gated", leader: true, deployAnn: map[string]string{annotations.Strategy: good}, pod: rsPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.Strategy: good}
			p.OwnerReferences[0].Kind, p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "StatefulSet", "apps.kruise.io/v1beta1", "db", "s1"
		})},
		{name: "already gated (reinvocation)", leader: true, deployAnn: map[string]string{annotations.Strategy: good}, pod: rsPod(func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
		})},
		{name: "bare pod", leader: true, pod: rsPod(func(p *corev1.Pod) {
			p.OwnerReferences = nil
			p.Annotations = map[string]string{annotations.Strategy: good}
		})},
		// Shadow mode: decided by the placement leader, never held.
		{name: "shadow workload: not gated", leader: true, deployAnn: map[string]string{annotations.Strategy: good, annotations.Mode: "shadow"}, pod: rsPod()},
		{name: "shadow pod template: not gated", leader: true, deployAnn: map[string]string{annotations.Strategy: good},
			pod: rsPod(func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Mode: "Shadow"} })},
		{name: "default shadow: not gated", leader: true, defaultMode: "shadow", deployAnn: map[string]string{annotations.Strategy: good}, pod: rsPod()},
		{name: "default shadow, workload required: gated", leader: true, defaultMode: "shadow", deployAnn: map[string]string{annotations.Strategy: good, annotations.Mode: "required"}, pod: rsPod(), wantPatch: gatePatch},
		{name: "default shadow, ReplicaSet not cached yet: not gated", leader: true, defaultMode: "shadow", pod: rsPod(func(p *corev1.Pod) {
			p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "nginx-new", "rs2"
		})},
		{name: "shadow pod template, ReplicaSet not cached yet: not gated", leader: true, pod: rsPod(func(p *corev1.Pod) {
			p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "nginx-new", "rs2"
			p.Annotations = map[string]string{annotations.Mode: "shadow"}
		})},
		{name: "client-written shadow decision on a shadow pod: removed, not gated", leader: true, deployAnn: map[string]string{annotations.Strategy: good, annotations.Mode: "shadow"}, pod: rsPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.Shadow: `{"group":"karpenter.sh/capacity-type=spot","signature":"forged"}`}
		}), wantPatch: `[{"op":"remove","path":"/metadata/annotations/apportion.dev~1shadow"}]`, wantWarned: true},
		{name: "client-written shadow decision: removed, then gated", leader: true, deployAnn: map[string]string{annotations.Strategy: good}, pod: rsPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.Shadow: "{}"}
		}), wantPatch: `[{"op":"remove","path":"/metadata/annotations/apportion.dev~1shadow"},` + gatePatch[1:], wantWarned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMutator(t, tc.leader, tc.deployAnn)
			m.DefaultMode = tc.defaultMode
			ns := tc.namespace
			if ns == "" {
				ns = "web"
			}
			resp := m.Handle(context.Background(), request(t, ns, tc.pod))
			if !resp.Allowed {
				t.Fatalf("pod denied: %+v", resp.Result)
			}
			patch, _ := json.Marshal(resp.Patches)
			if len(resp.Patches) == 0 {
				patch = nil
			}
			if string(patch) != tc.wantPatch {
				t.Errorf("patch = %s, want %q", patch, tc.wantPatch)
			}
			if warned := len(resp.Warnings) > 0; warned != tc.wantWarned {
				t.Errorf("warnings = %q, want warned=%v", resp.Warnings, tc.wantWarned)
			}
			if tc.wantWarned && !strings.Contains(resp.Warnings[0], `group 1, item 2 "weight=x"`) && !strings.Contains(resp.Warnings[0], "only apportion writes its decisions") {
				t.Errorf("warning %q does not carry the parser's message", resp.Warnings[0])
			}
		})
	}
}

func TestPodMutatorUndecodableAdmits(t *testing.T) {
	m := newMutator(t, true, nil)
	req := request(t, "web", rsPod())
	req.Object.Raw = []byte("{not json")
	if resp := m.Handle(context.Background(), req); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("undecodable pod: %+v", resp)
	}
}

func TestWorkloadValidator(t *testing.T) {
	for _, tc := range []struct {
		obj     string
		allowed bool
		msg     string
	}{
		{`{"metadata":{"annotations":{"apportion.dev/strategy":"` + good + `"}}}`, true, ""},
		{`{"metadata":{}}`, true, ""},
		{`{"metadata":{"annotations":{"apportion.dev/mode":"shadow"}},"spec":{"template":{"metadata":{"annotations":{"apportion.dev/mode":"shadow","apportion.dev/strategy":"` + good + `"}}}}}`, true, ""},
		{`{"metadata":{},"spec":{"template":{"metadata":{"annotations":{"custom-pod-schedule-strategy":"a=b:c=d"}}}}}`, false,
			"spec.template.metadata.annotations[custom-pod-schedule-strategy]: invalid strategy: every group has weight 0"},
		{`{"metadata":{"annotations":{"apportion.dev/strategy":"a=b,weight=1::"}}}`, false, "invalid strategy: group 2: group is empty"},
		{`{"metadata":{"annotations":{"apportion.dev/strategy":"karpenter.sh/capacity-type=on-demand,bsae=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"}}}`, false,
			`metadata.annotations[apportion.dev/strategy]: invalid strategy: group 1, item 2 "bsae=2": did you mean "base"?`},
		{`{"metadata":{},"spec":{"template":{"metadata":{"annotations":{"apportion.dev/strategy":"a=b,wieght=1"}}}}}`, false,
			`spec.template.metadata.annotations[apportion.dev/strategy]: invalid strategy: group 1, item 2 "wieght=1": did you mean "weight"?`},
		{`{"metadata":{"annotations":{"apportion.dev/strategy":"a=b,weight=1,max=3"}}}`, true, ""},
		{`{"metadata":{},"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"annotations":{"apportion.dev/strategy":"a=b,wieght=1"}}}}}}}`, false,
			`spec.jobTemplate.spec.template.metadata.annotations[apportion.dev/strategy]: invalid strategy: group 1, item 2 "wieght=1": did you mean "weight"?`},
		{`{"metadata":{},"spec":{"podMetadata":{"annotations":{"apportion.dev/strategy":"a=b,weight=1::"}}}}`, false,
			`spec.podMetadata.annotations[apportion.dev/strategy]: invalid strategy: group 2: group is empty`},
		{`{"metadata":{"annotations":{"apportion.dev/strategy":"a=b,base=4,weight=1,max=3"}}}`, false,
			`group 1: base 4 is more than max 3`},
	} {
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(tc.obj)}}}
		resp := WorkloadValidator{}.Handle(context.Background(), req)
		if resp.Allowed != tc.allowed || (tc.msg != "" && !strings.Contains(resp.Result.Message, tc.msg)) {
			t.Errorf("%s: allowed=%v %+v, want allowed=%v message containing %q", tc.obj, resp.Allowed, resp.Result, tc.allowed, tc.msg)
		}
		if len(resp.Warnings) != 0 {
			t.Errorf("%s: warnings %q, want none", tc.obj, resp.Warnings)
		}
	}
}

// TestWorkloadValidatorWarnsAboutKnobs: a knob out of its range is admitted
// (apportion uses its default) with a warning kubectl shows, naming where.
func TestWorkloadValidatorWarnsAboutKnobs(t *testing.T) {
	obj := `{"metadata":{"annotations":{"apportion.dev/rebalance":"yes"}},"spec":{"template":{"metadata":{"annotations":{"apportion.dev/mode":"prefered","apportion.dev/strategy":"` + good + `"}}}}}`
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: []byte(obj)}}}
	resp := WorkloadValidator{}.Handle(context.Background(), req)
	want := []string{
		`apportion: metadata.annotations[apportion.dev/rebalance]: "yes" is neither true nor false; false is used`,
		`apportion: spec.template.metadata.annotations[apportion.dev/mode]: "prefered" is not required, preferred or shadow; it is ignored (the policy's or the default mode is used)`,
	}
	if !resp.Allowed || strings.Join(resp.Warnings, "\n") != strings.Join(want, "\n") {
		t.Fatalf("allowed=%v warnings:\n%s\nwant:\n%s", resp.Allowed, strings.Join(resp.Warnings, "\n"), strings.Join(want, "\n"))
	}
}

// TestPodMutatorTypoInStrategy: a pod whose workload's strategy has a typo
// for a reserved key is admitted unchanged, with a warning and an
// InvalidStrategy Event on the workload naming the item and the key meant.
func TestPodMutatorTypoInStrategy(t *testing.T) {
	m := newMutator(t, true, map[string]string{annotations.Strategy: "karpenter.sh/capacity-type=on-demand,base=2,wieght=1:karpenter.sh/capacity-type=spot,weight=3"})
	rec := m.Recorder.(*events.FakeRecorder)
	resp := m.Handle(context.Background(), request(t, "web", rsPod()))
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("pod not admitted unchanged: %+v", resp)
	}
	const fault = `invalid strategy: group 1, item 3 "wieght=1": did you mean "weight"?`
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "metadata.annotations[apportion.dev/strategy]: "+fault) {
		t.Errorf("warnings %q, want one naming %s", resp.Warnings, fault)
	}
	if len(rec.Events) != 1 {
		t.Fatalf("%d events, want 1", len(rec.Events))
	}
	if e := <-rec.Events; !strings.Contains(e, "InvalidStrategy") || !strings.Contains(e, fault) {
		t.Errorf("event %q, want InvalidStrategy naming %s", e, fault)
	}
}

// TestPodMutatorWarnsAboutKnobsOnce: the workload of a pod gets one
// InvalidAnnotation Event however many of its pods are admitted.
func TestPodMutatorWarnsAboutKnobsOnce(t *testing.T) {
	m := newMutator(t, true, map[string]string{annotations.Strategy: good, annotations.Rebalance: "yes"})
	rec := m.Recorder.(*events.FakeRecorder)
	for range 5 {
		if resp := m.Handle(context.Background(), request(t, "web", rsPod())); !resp.Allowed || len(resp.Patches) != 1 {
			t.Fatalf("pod not gated: %+v", resp)
		}
	}
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 1 || !strings.Contains(got[0], "InvalidAnnotation") || !strings.Contains(got[0], `apportion.dev/rebalance "yes" is neither true nor false`) {
		t.Fatalf("events %q, want one InvalidAnnotation naming apportion.dev/rebalance", got)
	}
}

// ownersCache is an in-memory cache that behaves like the informer cache,
// holding the Deployment web/nginx (strategy good) and its ReplicaSet.
func ownersCache(b *testing.B) *memcache.Reader {
	b.Helper()
	cache := memcache.New(test.Scheme())
	if err := cache.Add(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx", UID: "d1", Annotations: map[string]string{annotations.Strategy: good}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc", UID: "rs1", OwnerReferences: test.OwnedBy("apps/v1", "Deployment", "nginx", "d1")}},
	); err != nil {
		b.Fatal(err)
	}
	return cache
}

// BenchmarkPodMutator measures one admission of a Deployment pod whose
// strategy is on the Deployment, reading owners from an in-memory cache that
// behaves like the informer cache.
func BenchmarkPodMutator(b *testing.B) {
	m := newMutator(b, true, nil)
	m.Reader = ownersCache(b)
	req := request(b, "web", rsPod())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if resp := m.Handle(ctx, req); len(resp.Patches) != 1 {
			b.Fatal("not gated")
		}
	}
}

// TestPodMutatorArchitectures: pods without a strategy are held for
// placement by architecture when --architectures says so: all of them, or
// the ones whose namespace (label), workload or pod template (annotation)
// opted in.
func TestPodMutatorArchitectures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      string
		leader    bool
		namespace string
		deployAnn map[string]string
		pod       *corev1.Pod
		gated     bool
	}{
		{name: "opt-in: namespace labelled", mode: options.ArchitecturesOptIn, leader: true, namespace: "auto", pod: rsPod(), gated: true},
		{name: "opt-in: namespace not labelled", mode: options.ArchitecturesOptIn, leader: true, pod: rsPod()},
		{name: "opt-in: namespace labelled something else", mode: options.ArchitecturesOptIn, leader: true, namespace: "other", pod: rsPod()},
		{name: "opt-in: pod template annotated", mode: options.ArchitecturesOptIn, leader: true,
			pod: rsPod(func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Architectures: "auto"} }), gated: true},
		{name: "opt-in: Deployment annotated", mode: options.ArchitecturesOptIn, leader: true, deployAnn: map[string]string{annotations.Architectures: "auto"}, pod: rsPod(), gated: true},
		{name: "opt-in: bare pod in a labelled namespace", mode: options.ArchitecturesOptIn, leader: true, namespace: "auto",
			pod: rsPod(func(p *corev1.Pod) { p.OwnerReferences = nil }), gated: true},
		{name: "opt-in: Job pod in a labelled namespace", mode: options.ArchitecturesOptIn, leader: true, namespace: "auto",
			pod: rsPod(func(p *corev1.Pod) { p.OwnerReferences[0].Kind, p.OwnerReferences[0].APIVersion = "Job", "batch/v1" }), gated: true},
		{name: "all: any pod", mode: options.ArchitecturesAll, leader: true, pod: rsPod(func(p *corev1.Pod) { p.OwnerReferences = nil }), gated: true},
		{name: "all: no leader alive", mode: options.ArchitecturesAll, pod: rsPod()},
		{name: "all: DaemonSet pod", mode: options.ArchitecturesAll, leader: true, pod: rsPod(func(p *corev1.Pod) { p.OwnerReferences[0].Kind = "DaemonSet" })},
		{name: "all: opted out", mode: options.ArchitecturesAll, leader: true, deployAnn: map[string]string{annotations.Skip: "true"}, pod: rsPod()},
		{name: "all: excluded namespace", mode: options.ArchitecturesAll, leader: true, namespace: "kube-system", pod: rsPod()},
		{name: "off: labelled namespace", mode: options.ArchitecturesOff, leader: true, namespace: "auto", pod: rsPod()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMutator(t, tc.leader, tc.deployAnn,
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "auto", Labels: map[string]string{annotations.Architectures: "auto"}}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{annotations.Architectures: "off"}}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web"}})
			m.Architectures = tc.mode
			ns := tc.namespace
			if ns == "" {
				ns = "web"
			}
			pod := tc.pod
			if ns != "web" && len(pod.OwnerReferences) > 0 && pod.OwnerReferences[0].Kind == "ReplicaSet" {
				// The workload lives where the pod does.
				if err := m.Reader.(client.Client).Create(context.Background(), &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nginx-abc", UID: "rs1"}}); err != nil {
					t.Fatal(err)
				}
			}
			resp := m.Handle(context.Background(), request(t, ns, pod))
			if !resp.Allowed {
				t.Fatalf("pod denied: %+v", resp.Result)
			}
			if gated := len(resp.Patches) == 1; gated != tc.gated {
				t.Fatalf("gated = %v (%+v), want %v", gated, resp.Patches, tc.gated)
			}
		})
	}
}

// kataProfiles is a --runtime-class-profiles as the mutator gets it.
func kataProfiles(t testing.TB) map[string]profiles.Profile {
	t.Helper()
	list, err := profiles.Parse(`[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","quantity":"1","keepRequests":true}]`)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]profiles.Profile{list[0].RuntimeClassName: list[0]}
}

// peerPod makes rsPod a pod of runtimeClassName with cpu and memory in a
// container, a second container and an init container.
func peerPod(runtimeClassName string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.RuntimeClassName = ptr.To(runtimeClassName)
		r := corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")},
		}
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "nginx", Resources: r}, {Name: "log", Image: "busybox", Resources: r}}
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Resources: r}}
	}
}

// TestPodMutatorProfiles: pods of a profiled runtime class get the profile's
// rewrite in the same response as the gate, if any; pods of other classes
// get exactly what they would without profiles.
func TestPodMutatorProfiles(t *testing.T) {
	rewrite := []string{"add /spec/containers/0/resources", "add /spec/containers/1/resources", "add /spec/initContainers/0/resources", "add /metadata/annotations"}
	gate := "add /spec/schedulingGates"
	strategyOnDeploy := map[string]string{annotations.Strategy: good}
	for _, tc := range []struct {
		name      string
		leader    bool
		deployAnn map[string]string
		namespace string
		pod       *corev1.Pod
		want      []string // "op path" of each operation
	}{
		{name: "profiled, no strategy: rewritten", leader: true, pod: rsPod(peerPod("kata-remote")), want: rewrite},
		{name: "profiled, with a strategy: rewritten and gated in one patch", leader: true, deployAnn: strategyOnDeploy, pod: rsPod(peerPod("kata-remote")), want: append(rewrite[:4:4], gate)},
		{name: "profiled, no leader: rewritten, not gated", deployAnn: strategyOnDeploy, pod: rsPod(peerPod("kata-remote")), want: rewrite},
		{name: "profiled, invalid strategy: rewritten", leader: true, deployAnn: map[string]string{annotations.Strategy: "a=b,weight=x"}, pod: rsPod(peerPod("kata-remote")), want: rewrite},
		{name: "profiled bare pod", leader: true, pod: rsPod(peerPod("kata-remote"), func(p *corev1.Pod) { p.OwnerReferences = nil }), want: rewrite},
		{name: "profiled pod with nodeName: rewritten", leader: true, deployAnn: strategyOnDeploy, pod: rsPod(peerPod("kata-remote"), func(p *corev1.Pod) { p.Spec.NodeName = "n1" }), want: rewrite},
		{name: "profiled DaemonSet pod: rewritten", leader: true, pod: rsPod(peerPod("kata-remote"), func(p *corev1.Pod) { p.OwnerReferences[0].Kind = "DaemonSet" }), want: rewrite},
		{name: "profiled, opted out of placement: rewritten", leader: true, deployAnn: map[string]string{annotations.Strategy: good, annotations.Skip: "true"}, pod: rsPod(peerPod("kata-remote")), want: rewrite},
		{name: "profiled, existing annotations: the record is one more", leader: true, pod: rsPod(peerPod("kata-remote"), func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }),
			want: append(rewrite[:3:3], "add /metadata/annotations/apportion.dev~1original-resources")},
		{name: "profiled, excluded namespace: untouched", leader: true, namespace: "kube-system", deployAnn: strategyOnDeploy, pod: rsPod(peerPod("kata-remote"))},
		{name: "profiled mirror pod: untouched", leader: true, pod: rsPod(peerPod("kata-remote"), func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} })},
		{name: "other runtime class, no strategy: untouched", leader: true, pod: rsPod(peerPod("runc"))},
		{name: "other runtime class, with a strategy: the gate only", leader: true, deployAnn: strategyOnDeploy, pod: rsPod(peerPod("runc")), want: []string{gate}},
		{name: "no runtime class, with a strategy: the gate only", leader: true, deployAnn: strategyOnDeploy, pod: rsPod(), want: []string{gate}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMutator(t, tc.leader, tc.deployAnn)
			m.Profiles = kataProfiles(t)
			ns := tc.namespace
			if ns == "" {
				ns = "web"
			}
			resp := m.Handle(context.Background(), request(t, ns, tc.pod))
			if !resp.Allowed {
				t.Fatalf("pod denied: %+v", resp.Result)
			}
			var got []string
			for _, op := range resp.Patches {
				got = append(got, op.Operation+" "+op.Path)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("operations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			for _, op := range resp.Patches {
				switch op.Path {
				case "/spec/containers/0/resources":
					if b, _ := json.Marshal(op.Value); string(b) != `{"limits":{"kata.peerpods.io/vm":"1"},"requests":{"kata.peerpods.io/vm":"1"}}` {
						t.Errorf("first container's resources = %s", b)
					}
				case "/spec/containers/1/resources", "/spec/initContainers/0/resources":
					if b, _ := json.Marshal(op.Value); string(b) != `{}` {
						t.Errorf("%s = %s", op.Path, b)
					}
				}
			}
		})
	}
}

// TestPodMutatorProfileVMSizing: a profile with vmSizing adds Kata's sizing
// annotations to the admission patch (peerPod: 3 containers each limited to
// cpu 1, memory 2Gi), keeping one the user set on the pod.
func TestPodMutatorProfileVMSizing(t *testing.T) {
	list, err := profiles.Parse(`[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","vmSizing":true}]`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		userAnn map[string]string
		want    map[string]string
	}{
		{name: "no annotations", want: map[string]string{profiles.KataVCPUs: "3", profiles.KataMemory: "6144"}},
		{name: "vCPUs set by the user", userAnn: map[string]string{profiles.KataVCPUs: "16"}, want: map[string]string{profiles.KataVCPUs: "16", profiles.KataMemory: "6144"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMutator(t, true, nil)
			m.Profiles = map[string]profiles.Profile{"kata-remote": list[0]}
			pod := rsPod(peerPod("kata-remote"), func(p *corev1.Pod) { p.Annotations = tc.userAnn })
			resp := m.Handle(context.Background(), request(t, "web", pod))
			if !resp.Allowed {
				t.Fatalf("pod denied: %+v", resp.Result)
			}
			got := maps.Clone(tc.userAnn)
			if got == nil {
				got = map[string]string{}
			}
			for _, op := range resp.Patches {
				switch {
				case op.Path == "/metadata/annotations":
					for k, v := range op.Value.(map[string]string) {
						got[k] = v
					}
				case strings.HasPrefix(op.Path, "/metadata/annotations/"):
					got[strings.ReplaceAll(strings.TrimPrefix(op.Path, "/metadata/annotations/"), "~1", "/")] = op.Value.(string)
				}
			}
			delete(got, annotations.OriginalResources)
			if !maps.Equal(got, tc.want) {
				t.Errorf("annotations after the patch = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPodMutatorProfileIdempotent: a reinvocation with the rewritten, gated
// pod gets no operation.
func TestPodMutatorProfileIdempotent(t *testing.T) {
	m := newMutator(t, true, map[string]string{annotations.Strategy: good})
	m.Profiles = kataProfiles(t)
	pod := rsPod(peerPod("kata-remote"))
	full, err := profiles.Patch(pod, m.Profiles["kata-remote"])
	if err != nil || len(full) == 0 {
		t.Fatalf("ops %v, err %v", full, err)
	}
	vm := corev1.ResourceList{"kata.peerpods.io/vm": resource.MustParse("1")}
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: vm, Limits: vm}
	pod.Spec.Containers[1].Resources = corev1.ResourceRequirements{}
	pod.Spec.InitContainers[0].Resources = corev1.ResourceRequirements{}
	pod.Annotations = map[string]string{annotations.OriginalResources: `{"containers":{"c":{"requests":{"cpu":"1"}}}}`}
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
	if resp := m.Handle(context.Background(), request(t, "web", pod)); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("reinvocation patched: %+v", resp.Patches)
	}
}

// TestPodMutatorProfileFailsOpen: a pod whose containers do not decode (the
// partial decode skips them) is admitted unchanged, not even gated, and
// counted as an error.
func TestPodMutatorProfileFailsOpen(t *testing.T) {
	m := newMutator(t, true, map[string]string{annotations.Strategy: good})
	m.Profiles = kataProfiles(t)
	req := request(t, "web", rsPod(peerPod("kata-remote")))
	req.Object.Raw = bytes.Replace(req.Object.Raw, []byte(`"cpu":"1"`), []byte(`"cpu":"one"`), 1)
	before := testutil.ToFloat64(metrics.AdmissionTotal.WithLabelValues(ResultError))
	resp := m.Handle(context.Background(), req)
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("undecodable peer pod: allowed %v, patches %+v", resp.Allowed, resp.Patches)
	}
	if after := testutil.ToFloat64(metrics.AdmissionTotal.WithLabelValues(ResultError)); after != before+1 {
		t.Errorf("errors counted %v, want %v", after, before+1)
	}
}

type policies struct{ strategy, mode string }

func (p policies) Candidates(context.Context, string, *metav1.PartialObjectMetadata) ([]workload.Policy, error) {
	if p.strategy == "" {
		return nil, nil
	}
	return []workload.Policy{{Strategy: p.strategy, Mode: p.mode, Name: "web/policy"}}, nil
}

// TestPodMutatorPolicies: with a PolicySource, a workload without a
// strategy annotation is gated when a policy gives it one.
func TestPodMutatorPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy string
		gated  bool
	}{{good, true}, {"", false}} {
		m := newMutator(t, true, nil)
		m.Policies = policies{strategy: tc.policy}
		resp := m.Handle(context.Background(), request(t, "web", rsPod()))
		if gated := len(resp.Patches) == 1; gated != tc.gated {
			t.Errorf("policy %q: patches %+v, want gated %v", tc.policy, resp.Patches, tc.gated)
		}
	}
	// A policy in shadow mode: not gated; the default does not override it.
	m := newMutator(t, true, nil)
	m.Policies, m.DefaultMode = policies{strategy: good, mode: "shadow"}, "required"
	if resp := m.Handle(context.Background(), request(t, "web", rsPod())); len(resp.Patches) != 0 {
		t.Errorf("shadow policy: patches %+v, want none", resp.Patches)
	}
}

// TestPodMutatorShadowKeepsProfiles: a pod in shadow mode still gets its
// runtime-class profile (a separate feature, made at admission or never),
// but no gate.
func TestPodMutatorShadowKeepsProfiles(t *testing.T) {
	m := newMutator(t, true, map[string]string{annotations.Strategy: good, annotations.Mode: "shadow"})
	m.Profiles = kataProfiles(t)
	before := testutil.ToFloat64(metrics.AdmissionTotal.WithLabelValues(ResultShadow))
	resp := m.Handle(context.Background(), request(t, "web", rsPod(peerPod("kata-remote"))))
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("profile not applied: %+v", resp)
	}
	for _, op := range resp.Patches {
		if strings.HasPrefix(op.Path, "/spec/schedulingGates") {
			t.Errorf("a shadow pod gated: %+v", op)
		}
	}
	if after := testutil.ToFloat64(metrics.AdmissionTotal.WithLabelValues(ResultShadow)); after != before+1 {
		t.Errorf("shadow admissions counted %v, want %v", after, before+1)
	}
}

// benchmarkProfiles measures one admission of pod with the kata-remote
// profile configured and the strategy on the Deployment, as
// BenchmarkPodMutator does.
func benchmarkProfiles(b *testing.B, pod *corev1.Pod, wantOps int) {
	m := newMutator(b, true, nil)
	m.Profiles = kataProfiles(b)
	m.Reader = ownersCache(b)
	req := request(b, "web", pod)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if resp := m.Handle(ctx, req); len(resp.Patches) != wantOps {
			b.Fatalf("%d operations, want %d", len(resp.Patches), wantOps)
		}
	}
}

// BenchmarkPodMutatorOtherRuntimeClass: a pod of a runtime class without a
// profile costs what any pod does (compare BenchmarkPodMutator): no full
// decode.
func BenchmarkPodMutatorOtherRuntimeClass(b *testing.B) {
	benchmarkProfiles(b, rsPod(peerPod("runc")), 1)
}

// BenchmarkPodMutatorProfile: a pod of the profiled class, decoded whole and
// rewritten, and gated.
func BenchmarkPodMutatorProfile(b *testing.B) {
	benchmarkProfiles(b, rsPod(peerPod("kata-remote")), 5)
}

// strictPolicy is a cluster policy that covers every workload and may refuse
// apportion.dev/skip.
type strictPolicy struct{ noSkip bool }

func (p strictPolicy) Candidates(context.Context, string, *metav1.PartialObjectMetadata) ([]workload.Policy, error) {
	return []workload.Policy{{Strategy: good, Name: "platform", Cluster: true, NoSkip: p.noSkip}}, nil
}

func (p strictPolicy) SkipMayBeRefused(context.Context) bool { return p.noSkip }

// TestPodMutatorClusterSkip: a pod whose template opts out is gated when
// the cluster policy placing it refuses the opt-out (allowSkip: false),
// also when its ReplicaSet is not cached yet; left alone otherwise.
func TestPodMutatorClusterSkip(t *testing.T) {
	skip := func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Skip: "true"} }
	uncached := func(p *corev1.Pod) { p.OwnerReferences = test.OwnedBy("apps/v1", "ReplicaSet", "nginx-new", "rs9") }
	for _, tc := range []struct {
		name   string
		noSkip bool
		pod    *corev1.Pod
		gated  bool
	}{
		{name: "skip allowed", pod: rsPod(skip)},
		{name: "skip refused", noSkip: true, pod: rsPod(skip), gated: true},
		{name: "skip allowed, not cached", pod: rsPod(skip, uncached)},
		{name: "skip refused, not cached", noSkip: true, pod: rsPod(skip, uncached), gated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMutator(t, true, nil)
			m.Policies = strictPolicy{noSkip: tc.noSkip}
			resp := m.Handle(context.Background(), request(t, "web", tc.pod))
			if gated := len(resp.Patches) == 1; gated != tc.gated {
				t.Errorf("patches %+v, want gated %v", resp.Patches, tc.gated)
			}
		})
	}
}
