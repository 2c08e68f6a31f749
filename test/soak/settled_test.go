package main

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
)

const (
	od   = "karpenter.sh/capacity-type=on-demand"
	spot = "karpenter.sh/capacity-type=spot"
)

var testNodes = map[string]map[string]string{
	"od":   {"karpenter.sh/capacity-type": "on-demand"},
	"spot": {"karpenter.sh/capacity-type": "spot"},
	"gpu":  {"dedicated": "gpu"},
}

// pods returns n Running pods on node, each claiming group in its
// decision.
func pods(n int, node, group string) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotations.Group: group, rolloutAnnotation: "3"}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	return out
}

func TestSampleWorkload(t *testing.T) {
	done := rollout{replicas: 10, revision: "3"}
	// 10 pods of the capacity spread: 4 on-demand, 6 spot.
	exact := append(pods(4, "od", od), pods(6, "spot", spot)...)
	pendingOne := append(pods(4, "od", od), pods(5, "spot", spot)...)
	pendingOne = append(pendingOne, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{rolloutAnnotation: "3"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}})
	oldRevision := append(pods(4, "od", od), pods(6, "spot", spot)...)
	oldRevision[9].Annotations[rolloutAnnotation] = "2"
	undecided := append(pods(6, "od", od), pods(4, "spot", spot)...)
	delete(undecided[0].Annotations, annotations.Group)
	fallback := append(pods(6, "od", od), pods(4, "spot", spot)...)
	fallback[0].Annotations[annotations.Fallback] = spot
	for _, tc := range []struct {
		name  string
		r     rollout
		dirty bool
		pods  []*corev1.Pod
		want  verdict
		why   string
	}{
		{"within", done, false, exact, withinQuota, ""},
		{"rollout in progress", done, false, oldRevision, unsettled, ""},
		{"the first revision", rollout{replicas: 10}, false, exact, unsettled, ""},
		{"a policy change waits for its rollout", done, true, exact, unsettled, ""},
		{"fewer pods than replicas", done, false, exact[:9], unsettled, ""},
		{"a pod not Running", done, false, pendingOne, unsettled, ""},
		{"fallback pods", done, false, fallback, fellBack, ""},
		{"a pod without a decision", done, false, undecided, withUndecided, ""},
		{"off by node labels", done, false, append(pods(6, "od", od), pods(4, "spot", spot)...), offQuota, od + ": 6, quota 4..4 of 10"},
		// The decision says spot; the node says otherwise: the node wins.
		{"decision and node disagree", done, false, append(pods(4, "od", od), append(pods(5, "spot", spot), pods(1, "od", spot)...)...), offQuota, od + ": 5"},
		{"on a node of no group", done, false, append(pods(4, "od", od), append(pods(5, "spot", spot), pods(1, "gpu", spot)...)...), offQuota, "(no group): 1"},
		{"on a node gone", done, false, append(pods(4, "od", od), append(pods(5, "spot", spot), pods(1, "gone", spot)...)...), unsettled, ""},
	} {
		got := sampleWorkload(od+",base=2,weight=1:"+spot+",weight=3", tc.r, tc.dirty, tc.pods, testNodes, removal{})
		if got.verdict != tc.want || !strings.Contains(got.why, tc.why) {
			t.Errorf("%s: verdict %d (%q), want %d (containing %q)", tc.name, got.verdict, got.why, tc.want, tc.why)
		}
	}
	// A scale-down removed a not-ready pod after these pods were created:
	// the survivors are not held to the quota; pods created after it are.
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	off := append(pods(6, "od", od), pods(4, "spot", spot)...)
	for _, p := range off {
		p.CreationTimestamp = metav1.NewTime(created)
	}
	if got := sampleWorkload(od+",base=2,weight=1:"+spot+",weight=3", done, false, off, testNodes, removal{created.Add(time.Second), "3"}); got.verdict != survivor {
		t.Errorf("survivors of a not-ready removal: verdict %d, want %d", got.verdict, survivor)
	}
	if got := sampleWorkload(od+",base=2,weight=1:"+spot+",weight=3", done, false, off, testNodes, removal{created.Add(-time.Second), "3"}); got.verdict != offQuota {
		t.Errorf("pods created after a not-ready removal: verdict %d, want off quota", got.verdict)
	}
	// A rollout removed a not-ready pod of the revision before: that is
	// no scale-down of these pods.
	if got := sampleWorkload(od+",base=2,weight=1:"+spot+",weight=3", done, false, off, testNodes, removal{created.Add(time.Second), "2"}); got.verdict != offQuota {
		t.Errorf("a not-ready pod of an older revision removed: verdict %d, want off quota", got.verdict)
	}
	if got := sampleWorkload("karpenter.sh/capacity-type=spot,weight=x", done, false, exact, testNodes, removal{}); got.verdict != offQuota {
		t.Errorf("a strategy that does not parse: verdict %d, want off quota", got.verdict)
	}
}

func TestRollouts(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{rolloutAnnotation: "7"}}}
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](4), Template: tmpl}}
	if r := deploymentRollout(d); r != (rollout{replicas: 4, revision: "7"}) {
		t.Errorf("Deployment: %+v", r)
	}
	st := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Template: tmpl}}
	if r := statefulSetRollout(st); r != (rollout{replicas: 1, revision: "7"}) {
		t.Errorf("StatefulSet without replicas: %+v, want 1 (the default)", r)
	}
}

func TestPendingPast(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pod := func(name string, age time.Duration, edit func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age)),
			Annotations: map[string]string{}}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
		edit(p)
		return p
	}
	unschedulable := func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available\nmore"}}
	}
	live := map[string][]*corev1.Pod{"w": {
		pod("young", time.Minute, func(*corev1.Pod) {}),
		pod("gated", 5*time.Minute, func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
		}),
		pod("decided", 5*time.Minute, func(p *corev1.Pod) {
			p.Annotations[annotations.Group] = spot
			p.Annotations[annotations.NodePool] = "spot-amd64"
			unschedulable(p)
		}),
		pod("undecided", 5*time.Minute, unschedulable),
		pod("running", 5*time.Minute, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }),
	}}
	got := pendingPast(live, 3*time.Minute, now)
	want := []struct {
		pod       string
		apportion bool
		why       string
	}{
		{"ns/decided", true, "decided " + spot + " on NodePool spot-amd64; Unschedulable: 0/3 nodes are available"},
		{"ns/gated", true, "held by the placement gate"},
		{"ns/undecided", false, "no decision; Unschedulable"},
	}
	if len(got) != len(want) {
		t.Fatalf("pending past the timeout: %+v, want %d pods", got, len(want))
	}
	for i, w := range want {
		if got[i].Pod != w.pod || got[i].Apportion != w.apportion || !strings.HasPrefix(got[i].Why, w.why) || strings.Contains(got[i].Why, "more") {
			t.Errorf("pending %d: %+v, want %s (apportion %t) %q", i, got[i], w.pod, w.apportion, w.why)
		}
	}
}

func TestOtherStrategies(t *testing.T) {
	s, err := compiled.Parse(od + ",base=2,weight=1:" + spot + ",weight=3")
	if err != nil {
		t.Fatal(err)
	}
	mine := decision.StrategyHash(s.Strategy)
	ps := pods(3, "spot", spot)
	ps[0].Annotations[annotations.Decision] = `{"strategy":"` + mine + `","counts":[0,0],"reason":"quota"}`
	ps[1].Annotations[annotations.Decision] = `{"strategy":"abc","counts":[0,0],"reason":"quota"}`
	if got := otherStrategies(s, ps[:1]); got != "" {
		t.Errorf("a pod decided under the strategy: %q", got)
	}
	if got := otherStrategies(s, ps); !strings.Contains(got, "map[abc:1]") {
		t.Errorf("a pod decided under another strategy: %q", got)
	}
}
