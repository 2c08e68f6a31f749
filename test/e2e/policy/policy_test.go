//go:build e2e

package policy_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	ct       = karpv1.CapacityTypeLabelKey
	onDemand = karpv1.CapacityTypeOnDemand
	spot     = karpv1.CapacityTypeSpot
)

// seed004 in structured form: on-demand base 2 weight 1, spot weight 3.
func seed004() *v1alpha1.Strategy {
	return &v1alpha1.Strategy{Groups: []v1alpha1.Group{
		{Labels: map[string]string{ct: onDemand}, Base: 2, Weight: 1},
		{Labels: map[string]string{ct: spot}, Weight: 3},
	}}
}

// only sends every pod to one capacity type.
func only(capacityType string) *v1alpha1.Strategy {
	other := spot
	if capacityType == spot {
		other = onDemand
	}
	return &v1alpha1.Strategy{Groups: []v1alpha1.Group{
		{Labels: map[string]string{ct: capacityType}, Weight: 1},
		{Labels: map[string]string{ct: other}, Weight: 0},
	}}
}

func newNamespace(t *testing.T) string {
	t.Helper()
	return framework.NewNamespace(t, env.Kube, framework.TestNamespaceName(t, "policy"), nil)
}

func deployment(ns, name string, replicas int32, ann map[string]string) *appsv1.Deployment {
	d := framework.Deployment(ns, name, replicas, ann, framework.AppPodSpec("registry.invalid/app:1"))
	d.Labels = map[string]string{"app": name}
	return d
}

func placementPolicy(ns, name, target string, s *v1alpha1.Strategy) *v1alpha1.PlacementPolicy {
	return &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.PlacementPolicySpec{
			Target:   v1alpha1.Target{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			Strategy: s,
		},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	framework.Create(t, env.Kube, obj)
}

func scale(t *testing.T, d *appsv1.Deployment, replicas int32) {
	t.Helper()
	framework.Scale(t, env.Kube, client.ObjectKeyFromObject(d), replicas)
}

// placed is a Running pod with its node's capacity type.
type placed struct {
	pod      corev1.Pod
	capacity string
}

// waitRunning waits until name has n live pods, all ungated, bound and
// Running, and returns them with their nodes' capacity types.
func waitRunning(t *testing.T, ns, name string, n int) []placed {
	t.Helper()
	var out []placed
	framework.WaitFor(t, 3*time.Minute, fmt.Sprintf("%d Running pods of %s", n, name), func() error {
		var list corev1.PodList
		if err := env.Kube.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
			return err
		}
		out = out[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			if decision.HasGate(&p) || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s not Running on a node yet (phase %s, node %q)", p.Name, p.Status.Phase, p.Spec.NodeName)
			}
			var node corev1.Node
			if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: p.Spec.NodeName}, &node); err != nil {
				return err
			}
			out = append(out, placed{pod: p, capacity: node.Labels[ct]})
		}
		if len(out) != n {
			return fmt.Errorf("%d live pods", len(out))
		}
		return nil
	})
	return out
}

func countBy(ps []placed) map[string]int {
	out := map[string]int{}
	for _, p := range ps {
		out[p.capacity]++
	}
	return out
}

func checkSplit(t *testing.T, ps []placed, want map[string]int) {
	t.Helper()
	if got := countBy(ps); !maps.Equal(got, want) {
		t.Errorf("pods by node capacity type %v, want %v", got, want)
	} else {
		t.Logf("pods by node capacity type %v", got)
	}
}

func condition(st v1alpha1.PlacementPolicyStatus, typ string) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// waitStatus waits until the policy's status, for its current generation,
// satisfies ok, and returns it.
func waitStatus(t *testing.T, ns, name, what string, ok func(v1alpha1.PlacementPolicyStatus) error) v1alpha1.PlacementPolicyStatus {
	t.Helper()
	var p v1alpha1.PlacementPolicy
	framework.WaitFor(t, 90*time.Second, "status of PlacementPolicy "+name+": "+what, func() error {
		if err := env.Kube.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			return err
		}
		if p.Status.ObservedGeneration != p.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", p.Status.ObservedGeneration, p.Generation)
		}
		if err := ok(p.Status); err != nil {
			return fmt.Errorf("%w (status %+v)", err, p.Status)
		}
		return nil
	})
	return p.Status
}

// groups checks the desired and actual counts per group, in strategy order.
func groups(desiredActual ...int32) func(v1alpha1.PlacementPolicyStatus) error {
	return func(st v1alpha1.PlacementPolicyStatus) error {
		if len(st.Groups)*2 != len(desiredActual) {
			return fmt.Errorf("%d groups", len(st.Groups))
		}
		for i, g := range st.Groups {
			if g.Desired != desiredActual[2*i] || g.Actual != desiredActual[2*i+1] {
				return fmt.Errorf("group %s: desired %d actual %d, want %d %d", g.Key, g.Desired, g.Actual, desiredActual[2*i], desiredActual[2*i+1])
			}
		}
		return nil
	}
}

func all(checks ...func(v1alpha1.PlacementPolicyStatus) error) func(v1alpha1.PlacementPolicyStatus) error {
	return func(st v1alpha1.PlacementPolicyStatus) error {
		for _, c := range checks {
			if err := c(st); err != nil {
				return err
			}
		}
		return nil
	}
}

func conditionIs(typ string, status metav1.ConditionStatus, reason string) func(v1alpha1.PlacementPolicyStatus) error {
	return func(st v1alpha1.PlacementPolicyStatus) error {
		if c := condition(st, typ); c.Status != status || c.Reason != reason {
			return fmt.Errorf("%s is %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
		}
		return nil
	}
}

func withinQuota(want bool) func(v1alpha1.PlacementPolicyStatus) error {
	return func(st v1alpha1.PlacementPolicyStatus) error {
		if st.WithinQuota != want {
			return fmt.Errorf("withinQuota %v", st.WithinQuota)
		}
		return nil
	}
}

// kubectlGet prints `kubectl get placementpolicies` of ns into the log.
func kubectlGet(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := env.C.Command("kubectl", append([]string{"get", "placementpolicies", "-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Errorf("kubectl get placementpolicies: %v: %s", err, out)
	}
	t.Logf("kubectl get placementpolicies -n %s %s\n%s", ns, strings.Join(args, " "), out)
	return string(out)
}

// TestPolicy walks one Deployment without annotations through a policy's
// life: the split and its status, an edit that only new pods follow, a newer
// policy that loses, and the closing `kubectl get placementpolicies`.
func TestPolicy(t *testing.T) {
	ns := newNamespace(t)
	first := placementPolicy(ns, "web-split", "web", seed004())
	create(t, first)
	d := deployment(ns, "web", 10, nil)
	create(t, d)

	ps := waitRunning(t, ns, "web", 10)
	checkSplit(t, ps, map[string]int{onDemand: 4, spot: 6})
	for _, p := range ps {
		if g := p.pod.Annotations[annotations.Group]; g != ct+"="+p.capacity {
			t.Errorf("pod %s on %s has group %q", p.pod.Name, p.capacity, g)
		}
	}
	st := waitStatus(t, ns, first.Name, "desired 4/6, actual 4/6, within quota, Ready", all(
		groups(4, 4, 6, 6), withinQuota(true),
		conditionIs(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonApplied),
		conditionIs(v1alpha1.ConditionConflict, metav1.ConditionFalse, v1alpha1.ReasonNoConflict),
		conditionIs(v1alpha1.ConditionGroupUnavailable, metav1.ConditionFalse, v1alpha1.ReasonGroupsAvailable),
	))
	if st.Replicas != 10 || st.Target != "Deployment/web" || st.Groups[0].NodePool == "" || st.Groups[1].NodePool == "" {
		t.Errorf("status %+v", st)
	}
	t.Logf("status groups %+v", st.Groups)

	t.Run("an edit applies to new pods, existing pods stay", func(t *testing.T) {
		before := map[types.UID]string{}
		for _, p := range ps {
			before[p.pod.UID] = p.pod.Spec.NodeName
		}
		var cur v1alpha1.PlacementPolicy
		framework.WaitFor(t, 30*time.Second, "editing the policy", func() error {
			if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(first), &cur); err != nil {
				return err
			}
			cur.Spec.Strategy = only(onDemand)
			return env.Kube.Update(t.Context(), &cur)
		})
		waitStatus(t, ns, first.Name, "the new strategy", func(st v1alpha1.PlacementPolicyStatus) error {
			if want := ct + "=on-demand,weight=1:" + ct + "=spot"; st.Strategy != want {
				return fmt.Errorf("strategy %q, want %q", st.Strategy, want)
			}
			return nil
		})
		scale(t, d, 14)
		after := waitRunning(t, ns, "web", 14)
		var fresh []placed
		for _, p := range after {
			node, old := before[p.pod.UID]
			switch {
			case !old:
				fresh = append(fresh, p)
			case node != p.pod.Spec.NodeName:
				t.Errorf("pod %s moved from %s to %s", p.pod.Name, node, p.pod.Spec.NodeName)
			}
		}
		if len(fresh) != 4 || len(after)-len(fresh) != 10 {
			t.Fatalf("%d new pods and %d old, want 4 and 10", len(fresh), len(after)-len(fresh))
		}
		checkSplit(t, fresh, map[string]int{onDemand: 4})
		checkSplit(t, after, map[string]int{onDemand: 8, spot: 6})
		// The old pods are off the new split: the status says so.
		waitStatus(t, ns, first.Name, "desired 14/0, actual 8/6, not within quota", all(groups(14, 8, 0, 6), withinQuota(false)))
	})

	t.Run("a newer policy for the same Deployment has no effect", func(t *testing.T) {
		second := placementPolicy(ns, "web-spot", "web", only(spot))
		second.Spec.Target = v1alpha1.Target{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
		create(t, second)
		st := waitStatus(t, ns, second.Name, "Conflict OlderPolicyWins", all(
			conditionIs(v1alpha1.ConditionConflict, metav1.ConditionTrue, v1alpha1.ReasonOlderPolicyWins),
			conditionIs(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConflict)))
		if msg := condition(st, v1alpha1.ConditionConflict).Message; !strings.Contains(msg, first.Name) {
			t.Errorf("Conflict message %q does not name the winner %s", msg, first.Name)
		}
		scale(t, d, 16)
		after := waitRunning(t, ns, "web", 16)
		checkSplit(t, after, map[string]int{onDemand: 10, spot: 6})
		waitStatus(t, ns, first.Name, "still placing, no conflict, desired 16/0, actual 10/6", all(
			conditionIs(v1alpha1.ConditionConflict, metav1.ConditionFalse, v1alpha1.ReasonNoConflict), groups(16, 10, 0, 6),
			func(st v1alpha1.PlacementPolicyStatus) error {
				if st.Replicas != 16 {
					return fmt.Errorf("replicas %d", st.Replicas)
				}
				return nil
			}))
	})

	// The closing note: what `kubectl get placementpolicies` shows.
	out := kubectlGet(t, ns)
	for _, col := range []string{"TARGET", "REPLICAS", "WITHIN QUOTA", "READY", "AGE"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get placementpolicies does not show the column %q", col)
		}
	}
	// Replicas is the Deployment's (16) for the policy that places it, 0
	// for the one that lost; the old pods keep web-split off its quota.
	for _, row := range []string{"web-split Deployment/web 16 false True", "web-spot app=web (1) 0 false False"} {
		want := strings.Fields(row)
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
			got := strings.Fields(line)
			return len(got) > len(want) && slices.Equal(got[:len(want)], want)
		}) {
			t.Errorf("kubectl get placementpolicies has no row %q", row)
		}
	}
	kubectlGet(t, ns, "-o", "wide")
}

// TestAnnotationWins: a workload's own strategy annotation wins, and the
// policy says so.
func TestAnnotationWins(t *testing.T) {
	ns := newNamespace(t)
	p := placementPolicy(ns, "api-on-demand", "api", only(onDemand))
	create(t, p)
	create(t, deployment(ns, "api", 3, map[string]string{annotations.Strategy: ct + "=spot,weight=1"}))
	checkSplit(t, waitRunning(t, ns, "api", 3), map[string]int{spot: 3})
	st := waitStatus(t, ns, p.Name, "Conflict AnnotationWins", all(
		conditionIs(v1alpha1.ConditionConflict, metav1.ConditionTrue, v1alpha1.ReasonAnnotationWins),
		conditionIs(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConflict)))
	t.Logf("Conflict: %s", condition(st, v1alpha1.ConditionConflict).Message)
	kubectlGet(t, ns)
}

// TestDistributionForm: seed 001's PodDistributor spec, weights as
// percentages.
func TestDistributionForm(t *testing.T) {
	ns := newNamespace(t)
	p := &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nginx-deployment"},
		Spec: v1alpha1.PlacementPolicySpec{
			Target: v1alpha1.Target{APIVersion: "apps/v1", Kind: "Deployment", Name: "nginx-deployment"},
			Distribution: []v1alpha1.DistributionEntry{
				{NodeLabel: map[string]string{ct: onDemand}, Weight: 80},
				{NodeLabel: map[string]string{ct: spot}, Weight: 20},
			},
		},
	}
	create(t, p)
	create(t, deployment(ns, "nginx-deployment", 5, nil))
	checkSplit(t, waitRunning(t, ns, "nginx-deployment", 5), map[string]int{onDemand: 4, spot: 1})
	waitStatus(t, ns, p.Name, "desired 4/1, actual 4/1", all(groups(4, 4, 1, 1), withinQuota(true),
		conditionIs(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonApplied)))
	var got v1alpha1.PlacementPolicy
	if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(p), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Mode != "" {
		t.Errorf("mode defaulted to %q, want it unset (the installation's default mode applies)", got.Spec.Mode)
	}
	kubectlGet(t, ns)
}

// TestInvalidRejected: an invalid strategy is refused at apply, by the
// webhook with the parser's message, or by the CRD's schema.
func TestInvalidRejected(t *testing.T) {
	ns := newNamespace(t)
	for _, tc := range []struct {
		name string
		spec v1alpha1.PlacementPolicySpec
		msg  string
	}{
		{"bad weight (webhook)", v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Text: ct + "=spot,weight=x"}},
			`spec.strategy.text: invalid strategy: group 1, item 2 "weight=x": weight must be a non-negative integer, got "x"`},
		{"bad label key (webhook)", v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: []v1alpha1.Group{{Labels: map[string]string{"bad key": "x"}, Weight: 1}}}},
			`spec.strategy.groups[0]: invalid strategy: group 1, item 1 "bad key=x": invalid node label key`},
		{"no weight (schema)", v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: []v1alpha1.Group{{Labels: map[string]string{ct: spot}, Base: 1}}}},
			"every group has weight 0"},
		{"two forms (schema)", v1alpha1.PlacementPolicySpec{Strategy: seed004(), Distribution: []v1alpha1.DistributionEntry{{NodeLabel: map[string]string{ct: spot}, Weight: 1}}},
			"exactly one of strategy and distribution must be set"},
		{"bad mode (schema)", v1alpha1.PlacementPolicySpec{Strategy: seed004(), Mode: "sometimes"},
			`spec.mode: Unsupported value: "sometimes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: tc.spec}
			p.Spec.Target = v1alpha1.Target{Kind: "Deployment", Name: "web"}
			err := env.Kube.Create(t.Context(), p)
			if err == nil {
				_ = env.Kube.Delete(context.Background(), p)
				t.Fatalf("created, want refused with %q", tc.msg)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("refused with %q, want a message containing %q", err, tc.msg)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
	// As kubectl prints it.
	manifest := fmt.Sprintf(`apiVersion: apportion.dev/v1alpha1
kind: PlacementPolicy
metadata: {name: typo, namespace: %s}
spec:
  target: {apiVersion: apps/v1, kind: Deployment, name: web}
  strategy: {text: "%s=on-demand,base=2,weight=1:%s=spot,weight=three"}
`, ns, ct, ct)
	cmd := env.C.Command("kubectl", "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "group 2") {
		t.Errorf("kubectl apply of a typo: %v: %s", err, out)
	}
	fmt.Fprintf(os.Stderr, "kubectl apply of a strategy with a typo:\n%s\n", out)
}

// TestShadowToRequired: a Deployment of 13 pods placed by a policy in shadow
// mode runs wherever the scheduler put it. The policy switches to required
// without a rollout and the Deployment scales to 20: the 7 new pods are
// placed around the 13 running ones, counted by their nodes, so they go
// where the engine sends them from that split (not as from an empty one),
// and the split moves toward the quota.
func TestShadowToRequired(t *testing.T) {
	ns := newNamespace(t)
	p := placementPolicy(ns, "web-split", "web", seed004())
	p.Spec.Mode = v1alpha1.ModeShadow
	create(t, p)
	d := deployment(ns, "web", 13, nil)
	create(t, d)
	shadowPods := waitRunning(t, ns, "web", 13)
	framework.WaitFor(t, time.Minute, "a shadow decision on every pod", func() error {
		var pods corev1.PodList
		if err := env.Kube.List(t.Context(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": "web"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if !decision.HasShadow(&p) {
				return fmt.Errorf("pod %s has no %s yet", p.Name, annotations.Shadow)
			}
		}
		return nil
	})
	s, err := compiled.Parse(seed004Text)
	if err != nil {
		t.Fatal(err)
	}
	running := make([]int64, 2) // by node: on-demand, spot
	old := map[types.UID]bool{}
	for _, p := range shadowPods {
		running[s.Index[ct+"="+p.capacity]]++
		old[p.pod.UID] = true
	}
	// Where the engine sends 7 pods from the running split, and where it
	// would from an empty one (the shadow pods not counted).
	want, blind := make([]int64, 2), make([]int64, 2)
	from, empty := slices.Clone(running), make([]int64, 2)
	var next []string
	for range 7 {
		g := s.Method.Next(from, apportion.All)
		from[g]++
		want[g]++
		next = append(next, s.Strategy.Groups[g].Key())
		g = s.Method.Next(empty, apportion.All)
		empty[g]++
		blind[g]++
	}
	t.Logf("shadow pods by node %v; the 7 new pods should go %v (%v if the shadow pods were not counted)", running, want, blind)

	var cur v1alpha1.PlacementPolicy
	framework.WaitFor(t, 30*time.Second, "switching the policy to required", func() error {
		if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(p), &cur); err != nil {
			return err
		}
		cur.Spec.Mode = v1alpha1.ModeRequired
		return env.Kube.Update(t.Context(), &cur)
	})
	waitStatus(t, ns, p.Name, "the required mode seen", func(v1alpha1.PlacementPolicyStatus) error { return nil })
	// `kubectl apportion explain` counts the shadow pods as placement does.
	w := explainJSON[explain.WorkloadReport](t, "explain", "deployment/web", "-n", ns)
	if w.Mode != annotations.ModeRequired || w.Groups[0].Strays != running[0] || w.Groups[1].Strays != running[1] || len(w.Next) < 7 || !slices.Equal(w.Next[:7], next) {
		t.Errorf("explain: mode %s, groups %+v, next %v; want required, strays %v, next %v", w.Mode, w.Groups, w.Next, running, next)
	}
	scale(t, d, 20)
	after := waitRunning(t, ns, "web", 20)
	got := make([]int64, 2)
	for _, p := range after {
		if old[p.pod.UID] {
			continue
		}
		if _, ok := p.pod.Annotations[annotations.Group]; !ok {
			t.Errorf("new pod %s has no decision: %v", p.pod.Name, p.pod.Annotations)
		}
		got[s.Index[ct+"="+p.capacity]]++
	}
	final := []int64{running[0] + got[0], running[1] + got[1]}
	t.Logf("new pods by node %v; all 20 %v; the quota at 20 %v", got, final, s.Method.Counts(20))
	if !slices.Equal(got, want) {
		t.Errorf("the 7 new pods went %v, want %v: placed from the running split %v", got, want, running)
	}
	// Toward the quota: no farther from it than placing the new pods as
	// from an empty split would leave it.
	quota := s.Method.Counts(20)
	distance := func(c []int64) int64 { return abs(c[0]-quota[0]) + abs(c[1]-quota[1]) }
	if d, b := distance(final), distance([]int64{running[0] + blind[0], running[1] + blind[1]}); d > b {
		t.Errorf("the split %v is %d pods off the quota %v, placing as from an empty split leaves it %d off", final, d, quota, b)
	}

	// Scaled down to 10, the split is as close to the quota as the 20
	// pods allow: the shadow pods count in their node's group, so the pods
	// decided since are not simply the first to go.
	framework.WaitFor(t, time.Minute, "a deletion cost on every pod", func() error {
		var pods corev1.PodList
		if err := env.Kube.List(t.Context(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": "web"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if _, ok := p.Annotations[corev1.PodDeletionCost]; !ok {
				return fmt.Errorf("pod %s has no %s yet", p.Name, corev1.PodDeletionCost)
			}
		}
		return nil
	})
	scale(t, d, 10)
	left := make([]int64, 2)
	for _, p := range waitRunning(t, ns, "web", 10) {
		left[s.Index[ct+"="+p.capacity]]++
	}
	best := int64(-1)
	for a := max(0, 10-final[1]); a <= min(10, final[0]); a++ {
		if off := s.Method.OffQuota([]int64{a, 10 - a}, apportion.All); best < 0 || off < best {
			best = off
		}
	}
	t.Logf("after the scale-down to 10: %v; the quota at 10 %v", left, s.Method.Counts(10))
	if off := s.Method.OffQuota(left, apportion.All); off > best {
		t.Errorf("scaled down to 10, the split %v is %d off the quota %v; the pods %v allowed %d", left, off, s.Method.Counts(10), final, best)
	}
}

func abs(n int64) int64 { return max(n, -n) }
