package rebalance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const (
	seed004  = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	onDemand = "karpenter.sh/capacity-type=on-demand"
	spot     = "karpenter.sh/capacity-type=spot"
)

// fakeCapacity leaves out the groups in out.
type fakeCapacity struct{ out map[string]bool }

func (f *fakeCapacity) Choose(_ context.Context, s *strategy.Strategy, pod *corev1.Pod, _ []string, _ string) ([]catalog.Choice, []error, error) {
	if pod.Spec.NodeSelector["team"] != "web" {
		return nil, nil, errors.New("weighed without the pod's own node selector")
	}
	for _, term := range pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range term.MatchExpressions {
			if r.Key == "karpenter.sh/capacity-type" || r.Key == "karpenter.sh/nodepool" {
				return nil, nil, errors.New("weighed with the decision's node affinity")
			}
		}
		if len(term.MatchExpressions) != 1 || term.MatchExpressions[0].Key != corev1.LabelArchStable {
			return nil, nil, fmt.Errorf("the pod's own architecture requirement is gone: %v", term.MatchExpressions)
		}
	}
	errs := make([]error, len(s.Groups))
	for i, g := range s.Groups {
		if f.out[g.Key()] {
			errs[i] = fmt.Errorf("out of capacity")
		}
	}
	return make([]catalog.Choice, len(s.Groups)), errs, nil
}

type noWait struct{}

func (noWait) Wait(context.Context) error { return nil }

type fixture struct {
	t        *testing.T
	clk      *clocktesting.FakeClock
	kube     client.Client
	capacity *fakeCapacity
	recorder *events.FakeRecorder
	c        *Controller
	rs       *appsv1.ReplicaSet
	n        int
}

// newFixture: a Deployment with seed 004's strategy (rebalance as given)
// and its ReplicaSet; spot is out.
func newFixture(t *testing.T, rebalance string, funcs *interceptor.Funcs) *fixture {
	ann := map[string]string{annotations.Strategy: seed004}
	if rebalance != "" {
		ann[annotations.Rebalance] = rebalance
	}
	deploy, rs := test.Workload(ann)
	b := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(deploy, rs).WithIndex(&corev1.Pod{}, OwnerIndex, ownerIndex)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	f := &fixture{t: t, clk: clocktesting.NewFakeClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)), kube: b.Build(),
		capacity: &fakeCapacity{out: map[string]bool{spot: true}}, recorder: events.NewFakeRecorder(10), rs: rs}
	f.c = NewController(f.clk, f.kube, f.recorder, f.capacity, nil, testSigner, 1).WithLimiter(noWait{})
	return f
}

// testSigner signs the fixtures' decisions.
var testSigner = decision.RandomSigner()

// pod adds a pod of the ReplicaSet decided in group (signed), running unless
// pending, and returns its name.
func (f *fixture) pod(group, fallback string, pending bool) string {
	return f.podWith(group, fallback, pending, nil)
}

// podWith is pod with mutate applied to it before it is created.
func (f *fixture) podWith(group, fallback string, pending bool, mutate func(*corev1.Pod)) string {
	f.n++
	var out []string
	if fallback != "" {
		out = strings.Split(fallback, ";")
	}
	p := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("nginx-abc-%d", f.n), UID: types.UID(fmt.Sprintf("pod-%d", f.n)),
		CreationTimestamp: metav1.NewTime(f.clk.Now()),
		Annotations:       map[string]string{annotations.Strategy: seed004}},
		Owner: f.rs, NodeSelector: map[string]string{"team": "web"}, Requirements: []corev1.NodeSelectorRequirement{
			{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
			{Key: "karpenter.sh/capacity-type", Operator: corev1.NodeSelectorOpIn, Values: []string{strings.TrimPrefix(group, "karpenter.sh/capacity-type=")}},
			{Key: "karpenter.sh/nodepool", Operator: corev1.NodeSelectorOpIn, Values: []string{"pool"}},
		}, Phase: corev1.PodRunning, Group: group, Fallback: out, Signer: testSigner})
	if mutate != nil {
		mutate(p)
	}
	if pending {
		p.Status.Phase = corev1.PodPending
	} else {
		p.Spec.NodeName = "node-" + p.Name
	}
	if err := f.kube.Create(context.Background(), p); err != nil {
		f.t.Fatal(err)
	}
	return p.Name
}

// reconcile runs Reconcile on the pod and reports whether it still exists.
func (f *fixture) reconcile(name string) (exists bool, requeue time.Duration) {
	f.t.Helper()
	ctx := context.Background()
	var p corev1.Pod
	if err := f.kube.Get(ctx, client.ObjectKey{Namespace: "web", Name: name}, &p); err != nil {
		f.t.Fatal(err)
	}
	res, err := f.c.Reconcile(ctx, &p)
	if err != nil {
		f.t.Fatalf("Reconcile %s: %v", name, err)
	}
	err = f.kube.Get(ctx, client.ObjectKey{Namespace: "web", Name: name}, &p)
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil, res.RequeueAfter
}

func TestEvictsOnceTheGroupIsBack(t *testing.T) {
	f := newFixture(t, "true", nil)
	f.pod(onDemand, "", false)
	f.pod(onDemand, "", false)
	f.pod(spot, "", false)
	fb := f.pod(onDemand, spot, false)

	if exists, requeue := f.reconcile(fb); !exists || requeue != Recheck {
		t.Fatalf("spot still out: pod exists %v, requeue %s; want kept and a recheck in %s", exists, requeue, Recheck)
	}
	f.capacity.out = nil
	if exists, _ := f.reconcile(fb); exists {
		t.Fatal("spot back: the fallback pod was not evicted")
	}
	select {
	case e := <-f.recorder.Events:
		if !strings.Contains(e, "Rebalanced") || !strings.Contains(e, fb) || !strings.Contains(e, spot) {
			t.Errorf("Event %q: want Rebalanced naming the pod and the group", e)
		}
	default:
		t.Error("no Rebalanced Event")
	}
}

func TestOneAtATimePerWorkload(t *testing.T) {
	f := newFixture(t, "true", nil)
	f.capacity.out = nil
	// 6 on-demand pods, 4 of them fell back from spot: the split at 6 is
	// 3 and 3, so two evictions are needed.
	f.pod(onDemand, "", false)
	f.pod(onDemand, "", false)
	first := f.pod(onDemand, spot, false)
	second := f.pod(onDemand, spot, false)
	f.pod(onDemand, spot, false)
	f.pod(onDemand, spot, false)
	if exists, _ := f.reconcile(first); exists {
		t.Fatal("the first fallback pod was not evicted")
	}
	// No replacement yet: the second waits.
	if exists, requeue := f.reconcile(second); !exists || requeue != Recheck {
		t.Fatalf("second fallback pod before the replacement: exists %v, requeue %s; want kept", exists, requeue)
	}
	// The replacement exists but is Pending: still waits.
	f.clk.Step(2 * time.Second)
	pending := f.pod(spot, "", true)
	if exists, _ := f.reconcile(second); !exists {
		t.Fatal("evicted while the replacement was Pending")
	}
	// The replacement runs: the second goes.
	var p corev1.Pod
	if err := f.kube.Get(context.Background(), client.ObjectKey{Namespace: "web", Name: pending}, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.NodeName = "node-x"
	if err := f.kube.Update(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if err := f.kube.Status().Update(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
	if exists, _ := f.reconcile(second); exists {
		t.Fatal("the second fallback pod was not evicted once the replacement ran")
	}
}

func TestLeftAlone(t *testing.T) {
	cases := map[string]func(f *fixture) string{
		"workload not annotated": func(f *fixture) string { return f.pod(onDemand, spot, false) },
		"not a fallback pod":     func(f *fixture) string { return f.pod(onDemand, "", false) },
		"another pod pending": func(f *fixture) string {
			f.pod(spot, "", true)
			return f.pod(onDemand, spot, false)
		},
		"fell back from another group": func(f *fixture) string { return f.pod(spot, onDemand, false) },
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			rebalance := "true"
			if name == "workload not annotated" {
				rebalance = ""
			}
			f := newFixture(t, rebalance, nil)
			f.capacity.out = map[string]bool{onDemand: true}
			if name != "fell back from another group" {
				f.capacity.out = nil
			}
			pod := setup(f)
			if exists, _ := f.reconcile(pod); !exists {
				t.Fatalf("%s: pod %s was evicted", name, pod)
			}
		})
	}
}

func TestDisruptionBudgetRefusal(t *testing.T) {
	evictions := 0
	f := newFixture(t, "true", &interceptor.Funcs{
		SubResourceCreate: func(context.Context, client.Client, string, client.Object, client.Object, ...client.SubResourceCreateOption) error {
			evictions++
			return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		},
	})
	f.capacity.out = nil
	f.pod(onDemand, "", false)
	f.pod(onDemand, "", false)
	fb := f.pod(onDemand, spot, false)
	exists, requeue := f.reconcile(fb)
	if !exists || requeue != Blocked || evictions != 1 {
		t.Fatalf("PDB refusal: exists %v, requeue %s, evictions %d; want kept, retried in %s, one attempt", exists, requeue, evictions, Blocked)
	}
}

// TestLeftWhereTheReplacementWouldLand: a fallback pod whose group is no
// longer above its share (the split was repaired meanwhile) stays: its
// replacement would be placed in its own group again.
func TestLeftWhereTheReplacementWouldLand(t *testing.T) {
	for name, setup := range map[string]func(f *fixture) string{
		// Seed 004 at 5: on-demand 3, spot 2, which the pods hold.
		"split exact": func(f *fixture) string {
			f.pod(onDemand, "", false)
			f.pod(onDemand, "", false)
			f.pod(spot, "", false)
			f.pod(spot, "", false)
			return f.pod(onDemand, spot, false)
		},
		// Seed 004 at 2: both on-demand (the base); nothing for spot.
		"within the base": func(f *fixture) string {
			f.pod(onDemand, "", false)
			return f.pod(onDemand, spot, false)
		},
		// Seed 004 at 7: on-demand 3, spot 4; on-demand holds 3 (with
		// two fallback pods) and spot 4.
		"two fallback pods, the split repaired": func(f *fixture) string {
			f.pod(onDemand, "", false)
			f.pod(onDemand, spot, false)
			for range 4 {
				f.pod(spot, "", false)
			}
			return f.pod(onDemand, spot, false)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "true", nil)
			f.capacity.out = nil
			pod := setup(f)
			if exists, requeue := f.reconcile(pod); !exists || requeue != Recheck {
				t.Fatalf("pod exists %v, requeue %s: want it kept, looked at again in %s", exists, requeue, Recheck)
			}
		})
	}
}

// TestForgedFallbackIsLeftAlone: a fallback annotation apportion did not
// sign marks no pod for eviction, where a signed one in the same place would
// be evicted (TestEvictsOnceTheGroupIsBack).
func TestForgedFallbackIsLeftAlone(t *testing.T) {
	for name, forge := range map[string]func(p *corev1.Pod){
		"unsigned": func(p *corev1.Pod) { delete(p.Annotations, annotations.Signature) },
		"fallback added to a signed decision": func(p *corev1.Pod) {
			p.Annotations[annotations.Signature] = testSigner.Sign(p.UID, onDemand, "")
		},
		"signature copied from another pod": func(p *corev1.Pod) {
			p.Annotations[annotations.Signature] = testSigner.Sign("pod-1", onDemand, "", spot)
		},
		"another key": func(p *corev1.Pod) {
			p.Annotations[annotations.Signature] = decision.RandomSigner().Sign(p.UID, onDemand, "", spot)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "true", nil)
			f.capacity.out = nil
			f.pod(onDemand, "", false)
			f.pod(onDemand, "", false)
			f.pod(spot, "", false)
			forged := f.podWith(onDemand, spot, false, forge)
			var p corev1.Pod
			if err := f.kube.Get(context.Background(), client.ObjectKey{Namespace: "web", Name: forged}, &p); err != nil {
				t.Fatal(err)
			}
			if _, ok := f.c.candidate(&p); ok {
				t.Error("a forged fallback pod is a candidate")
			}
			if exists, _ := f.reconcile(forged); !exists {
				t.Fatal("a pod with a forged fallback annotation was evicted")
			}
		})
	}
}

// TestEvictionsAreForgotten: the record of an eviction goes once it can no
// longer hold its workload back, whether or not the workload comes back:
// with owners that each see one eviction and then are gone, one a minute,
// the controller keeps only those of the last ten minutes.
func TestEvictionsAreForgotten(t *testing.T) {
	f := newFixture(t, "true", nil)
	f.c.recorder = &events.FakeRecorder{} // drops the Events
	info := &workload.Info{Workload: workload.Ref{Kind: "Deployment", Namespace: "web", Name: "nginx"}}
	var p corev1.Pod
	for i := range 500 {
		f.clk.Step(time.Minute)
		name := f.pod(onDemand, spot, false)
		if err := f.kube.Get(context.Background(), client.ObjectKey{Namespace: "web", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		owner := types.UID(fmt.Sprintf("owner-%d", i))
		f.c.evict(context.Background(), &p, owner, sets.New(p.UID), info, spot)
		if _, ok := f.c.evicted[owner]; !ok {
			t.Fatalf("eviction %d not recorded", i)
		}
		if n, most := len(f.c.evicted), int(forget/time.Minute)+1; n > most {
			t.Fatalf("after %d owners evicted once each, one a minute: %d records, want at most %d", i+1, n, most)
		}
	}
}
