package deletioncost

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// testSigner signs the fixtures' decisions.
var testSigner = decision.RandomSigner()

// shadowPod gives p a shadow decision for group, signed by testSigner.
func shadowPod(p *corev1.Pod, group string) *corev1.Pod {
	decision.WriteShadow(p, decision.Shadow{Group: group, Signature: testSigner.SignShadow(p.UID, group, "")})
	return p
}

// TestReconcileOrdersStraysFirst: in a revision apportion places, a pod
// admitted without a decision gets a lower cost than every decided pod, a
// pod still held by the gate, or decided in shadow mode and not bound yet,
// is left alone, and a revision with no decided pod is not touched at all.
func TestReconcileOrdersStraysFirst(t *testing.T) {
	const seed004 = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	deploy, _ := test.Workload(map[string]string{annotations.Strategy: seed004})
	plain := test.Deployment(metav1.ObjectMeta{Namespace: "web", Name: "plain", UID: "plain-uid"})
	rs := func(name string, owner *appsv1.Deployment) *appsv1.ReplicaSet {
		return test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name + "-uid")}, owner)
	}
	placed, unplaced := rs("nginx-abc", deploy), rs("plain-xyz", plain)
	base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := func(owner *appsv1.ReplicaSet, i int, group string, gated bool) *corev1.Pod {
		p := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("%s-%d", owner.Name, i), UID: types.UID(fmt.Sprintf("%s-%d", owner.Name, i)),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
			Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"}}, Owner: owner, Gated: gated})
		if group != "" {
			p.Annotations = map[string]string{annotations.Group: group, annotations.Signature: testSigner.Sign(p.UID, group, "")}
		}
		return p
	}
	const od, spot = "karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"
	objs := []client.Object{deploy, plain, placed, unplaced,
		pod(placed, 0, od, false), pod(placed, 1, od, false), pod(placed, 2, spot, false),
		pod(placed, 3, "", false),                  // stray
		pod(placed, 4, "", true),                   // still gated
		shadowPod(pod(placed, 5, "", false), spot), // decided in shadow mode, not bound
		pod(unplaced, 0, "", false), pod(unplaced, 1, "", false),
		shadowPod(pod(unplaced, 2, "", false), spot),
	}
	c := ownedPodsClient(objs...)
	ctrl := NewController(c, testSigner)
	ctx := context.Background()
	for _, r := range []*appsv1.ReplicaSet{placed, unplaced} {
		if _, err := ctrl.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(r.UID)}}); err != nil {
			t.Fatal(err)
		}
	}
	cost := func(name string) (int, bool) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "web", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		v, ok := p.Annotations[Annotation]
		n, _ := strconv.Atoi(v)
		return n, ok
	}
	stray, ok := cost("nginx-abc-3")
	if !ok {
		t.Fatal("the stray pod got no deletion cost")
	}
	for i := range 3 {
		decided, ok := cost(fmt.Sprintf("nginx-abc-%d", i))
		if !ok || decided <= stray {
			t.Errorf("decided pod %d: cost %d (set %v), want above the stray's %d", i, decided, ok, stray)
		}
	}
	for _, name := range []string{"nginx-abc-4", "nginx-abc-5", "plain-xyz-0", "plain-xyz-1", "plain-xyz-2"} {
		if v, ok := cost(name); ok {
			t.Errorf("pod %s got cost %d; it should be left alone", name, v)
		}
	}
}

// TestForgedDecisionsAreStrays: decision annotations apportion did not sign
// (written by a client: no signature, a signature copied from another pod,
// a fallback added to a signed decision) give a pod no cost by group: it is a
// stray, first to go. A revision whose only "decisions" are forged is not
// apportion's: none of its pods gets a cost, and its pods enqueue nothing.
func TestForgedDecisionsAreStrays(t *testing.T) {
	const seed004 = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	const od, spot = "karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"
	deploy, _ := test.Workload(map[string]string{annotations.Strategy: seed004})
	rs := func(name string) *appsv1.ReplicaSet {
		return test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name + "-uid")}, deploy)
	}
	placed, forgedOnly := rs("nginx-abc"), rs("nginx-def")
	base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := func(owner *appsv1.ReplicaSet, i int, ann map[string]string) *corev1.Pod {
		return test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("%s-%d", owner.Name, i), UID: types.UID(fmt.Sprintf("%s-%d", owner.Name, i)),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
			Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"},
			Annotations:       ann}, Owner: owner})
	}
	signed := func(owner *appsv1.ReplicaSet, i int, group string, fallback ...string) *corev1.Pod {
		p := pod(owner, i, map[string]string{annotations.Group: group})
		p.Annotations[annotations.Signature] = testSigner.Sign(p.UID, group, "", fallback...)
		if len(fallback) > 0 {
			p.Annotations[annotations.Fallback] = fallback[0]
		}
		return p
	}
	decided := []*corev1.Pod{signed(placed, 0, od), signed(placed, 1, od), signed(placed, 2, spot), signed(placed, 3, spot, od)}
	forged := []*corev1.Pod{
		pod(placed, 4, map[string]string{annotations.Group: od}),
		pod(placed, 5, map[string]string{annotations.Group: od, annotations.Signature: decided[0].Annotations[annotations.Signature]}),
		func() *corev1.Pod { p := signed(placed, 6, spot); p.Annotations[annotations.Fallback] = od; return p }(),
		pod(placed, 7, map[string]string{annotations.Fallback: od}),
	}
	alone := []*corev1.Pod{
		pod(forgedOnly, 0, map[string]string{annotations.Group: od}),
		pod(forgedOnly, 1, map[string]string{annotations.Group: spot, annotations.Signature: decided[2].Annotations[annotations.Signature]}),
	}
	objs := []client.Object{deploy, placed, forgedOnly}
	for _, p := range append(append(append([]*corev1.Pod{}, decided...), forged...), alone...) {
		objs = append(objs, p)
	}
	c := ownedPodsClient(objs...)
	ctrl := NewController(c, testSigner)
	ctx := context.Background()
	h, q := ctrl.EventHandler(), &recordingQueue{}
	for _, p := range append(append([]*corev1.Pod{}, forged...), alone...) {
		h.Create(ctx, event.CreateEvent{Object: p}, q)
		if reqs := q.take(); len(reqs) != 0 {
			t.Errorf("forged pod %s enqueues %v", p.Name, reqs)
		}
	}
	h.Create(ctx, event.CreateEvent{Object: decided[0]}, q)
	if reqs := q.take(); len(reqs) != 1 || reqs[0].Name != string(placed.UID) {
		t.Errorf("decided pod enqueues %v, want its revision", reqs)
	}
	for _, r := range []*appsv1.ReplicaSet{placed, forgedOnly} {
		if _, err := ctrl.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(r.UID)}}); err != nil {
			t.Fatal(err)
		}
	}
	cost := func(p *corev1.Pod) (int, bool) {
		var got corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{annotations.Group, annotations.Fallback, annotations.Signature} {
			if got.Annotations[k] != p.Annotations[k] {
				t.Errorf("%s: %s changed from %q to %q", p.Name, k, p.Annotations[k], got.Annotations[k])
			}
		}
		v, ok := got.Annotations[Annotation]
		n, _ := strconv.Atoi(v)
		return n, ok
	}
	for _, p := range forged {
		if n, ok := cost(p); !ok || n != decision.StrayCost {
			t.Errorf("forged pod %s: cost %d (set %v), want the strays' %d", p.Name, n, ok, decision.StrayCost)
		}
	}
	// A signed fallback pod counts in the group it runs in: spot's second.
	if n, ok := cost(decided[3]); !ok || n != -3 {
		t.Errorf("signed fallback pod: cost %d (set %v), want spot's second place, -3", n, ok)
	}
	for _, p := range decided[:3] {
		if n, ok := cost(p); !ok || n < -2 {
			t.Errorf("decided pod %s: cost %d (set %v), want its place in the split (-2..0)", p.Name, n, ok)
		}
	}
	for _, p := range alone {
		if n, ok := cost(p); ok {
			t.Errorf("pod %s of a revision without a signed decision got cost %d", p.Name, n)
		}
	}
}

// ownedPodsClient is a fake client holding objs, with the pods indexed by
// their owner as the operator's cache indexes them.
func ownedPodsClient(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, IndexOwnerKey, func(o client.Object) []string {
			if k := workload.OwnerKey(o.(*corev1.Pod)); k != "" {
				return []string{k}
			}
			return nil
		}).Build()
}

// TestEventsThatChangeCosts: a revision is enqueued, after the debounce, for
// the events that may change its costs only: not for a pod placed with its
// cost, nor for a pod's status changing.
func TestEventsThatChangeCosts(t *testing.T) {
	deploy, rs := test.Workload(map[string]string{annotations.Strategy: "g=a,weight=1"})
	c := ownedPodsClient(deploy, rs)
	ctrl := NewController(c, testSigner).WithDebounce(time.Second)
	gated := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc-1", UID: "uid-1"}, Owner: rs, Gated: true})
	placed := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc-1", UID: "uid-1"}, Owner: rs, Group: "g=a", Signer: testSigner})
	withCost := func(p *corev1.Pod, cost string) *corev1.Pod {
		p = p.DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[Annotation] = cost
		return p
	}
	costed := withCost(placed, "0")
	running := costed.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	terminating := costed.DeepCopy()
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	stray := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc-2", UID: "uid-2"}, Owner: rs, NodeName: "n"})
	ctx := context.Background()
	// The revision holds a decided pod once a reconcile saw one.
	if err := c.Create(ctx, costed.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(rs.UID)}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		old, pod *corev1.Pod
		want     bool
	}{
		{"placed with its cost", gated, costed, false},
		{"placed without a cost", gated, placed, true},
		{"running", costed, running, false},
		{"cost edited", costed, withCost(placed, "-7"), true},
		{"terminating", running, terminating, true},
		{"stray released", stray, stray, false},
		{"stray appears", nil, stray, true},
		{"stray numbered", stray, withCost(stray, strayCostText), false},
	} {
		q := &recordingQueue{}
		if tc.old == nil {
			ctrl.EventHandler().Create(ctx, event.CreateEvent{Object: tc.pod}, q)
		} else {
			ctrl.EventHandler().Update(ctx, event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.pod}, q)
		}
		if got := len(q.added) == 1 && q.added[0].Name == string(rs.UID) && q.after[0] == time.Second; got != tc.want || len(q.added) > 1 {
			t.Errorf("%s: enqueued %v after %v, want the revision after 1s: %v", tc.name, q.added, q.after, tc.want)
		}
	}
}

// TestJobPodsKeepNoCost: the pods of a Job or an Argo Workflow are never
// given a deletion cost (the Job controller does not read it, Argo deletes
// no pod): none of their events enqueues anything, and the owner index
// leaves them out.
func TestJobPodsKeepNoCost(t *testing.T) {
	ctx := context.Background()
	ctrl := NewController(ownedPodsClient(), testSigner).WithDebounce(time.Second)
	for _, owner := range []metav1.OwnerReference{
		test.ControllerRef("batch/v1", "Job", "etl-1", "job1"),
		test.ControllerRef("argoproj.io/v1alpha1", "Workflow", "etl", "wf1"),
	} {
		meta := func(name string) metav1.ObjectMeta {
			return metav1.ObjectMeta{Namespace: "ci", Name: name, UID: types.UID(name), OwnerReferences: []metav1.OwnerReference{owner}}
		}
		gated := test.Pod(test.PodOptions{ObjectMeta: meta("p1"), Gated: true})
		placed := test.Pod(test.PodOptions{ObjectMeta: meta("p1"), Group: "g=a", Signer: testSigner})
		stray := test.Pod(test.PodOptions{ObjectMeta: meta("p2"), NodeName: "n"})
		q := &recordingQueue{}
		ctrl.EventHandler().Update(ctx, event.UpdateEvent{ObjectOld: gated, ObjectNew: placed}, q)
		ctrl.EventHandler().Create(ctx, event.CreateEvent{Object: stray}, q)
		ctrl.EventHandler().Delete(ctx, event.DeleteEvent{Object: placed}, q)
		if len(q.added) != 0 {
			t.Errorf("%s pod: enqueued %v, want nothing", owner.Kind, q.added)
		}
		if k := ownerKey(placed); k != "" {
			t.Errorf("%s pod: indexed under %q, want not indexed", owner.Kind, k)
		}
	}
}

// bothCapped caps both groups: at 7 replicas, 2 on-demand, 3 spot and 2
// beyond caps.
const bothCapped = "karpenter.sh/capacity-type=on-demand,weight=1,max=2:karpenter.sh/capacity-type=spot,weight=1,max=3"

// TestBeyondCapsPodsGoFirst: at 7 replicas of 2 on-demand (max 2) and 3
// spot (max 3), the 2 pods released beyond caps run on a spot node. They
// take the lowest cost, so a scale-down removes them first, and the spot
// pods keep the costs of their ranks 1 to 3: the pods beyond caps are not
// ranked in spot by their node.
func TestBeyondCapsPodsGoFirst(t *testing.T) {
	s, err := compiled.Parse(bothCapped)
	if err != nil {
		t.Fatal(err)
	}
	od, spot := s.Strategy.Groups[0].Key(), s.Strategy.Groups[1].Key()
	deploy, rs := test.Workload(map[string]string{annotations.Strategy: bothCapped})
	base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := func(i int, group string) *corev1.Pod {
		p := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("p%d", i)),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
			Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"}}, Owner: rs})
		p.Spec.NodeName = "spot-node"
		switch group {
		case "":
			decision.MarkBeyondCaps(p, decision.Record{Reason: "beyond_caps"}, testSigner.SignBeyondCaps(p.UID), nil)
		case od:
			p.Spec.NodeName = "od-node"
			fallthrough
		default:
			p.Annotations = map[string]string{annotations.Group: group, annotations.Signature: testSigner.Sign(p.UID, group, "")}
		}
		return p
	}
	objs := []client.Object{deploy, rs,
		test.Node("od-node", map[string]string{"karpenter.sh/capacity-type": "on-demand"}),
		test.Node("spot-node", map[string]string{"karpenter.sh/capacity-type": "spot"})}
	for i, g := range []string{od, spot, od, spot, spot, "", ""} {
		objs = append(objs, pod(i, g))
	}
	c := ownedPodsClient(objs...)
	ctx := context.Background()
	if _, err := NewController(c, testSigner).Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(rs.UID)}}); err != nil {
		t.Fatal(err)
	}
	cost := func(name string) int {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "web", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(p.Annotations[Annotation])
		if err != nil {
			t.Fatalf("%s: cost %q", name, p.Annotations[Annotation])
		}
		return n
	}
	rank := func(g int, c int64) int {
		cost, ok := decision.GroupCost(s.Method, g, c)
		if !ok {
			t.Fatalf("group %d, rank %d: no position", g, c)
		}
		return cost
	}
	// Within a group, without costs yet, the newest pod takes the highest
	// rank (removed first).
	want := map[string]int{"p0": rank(0, 1), "p2": rank(0, 2), "p1": rank(1, 1), "p3": rank(1, 2), "p4": rank(1, 3),
		"p5": decision.StrayCost, "p6": decision.StrayCost}
	for name, w := range want {
		if got := cost(name); got != w {
			t.Errorf("%s: cost %d, want %d", name, got, w)
		}
	}
}
