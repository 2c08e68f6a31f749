//go:build e2e

package policy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/test/framework"
)

// teamWeb is the namespace label the cluster policy selects.
var teamWeb = map[string]string{"team": "web"}

// livePods are the live pods of the Deployment name.
func livePods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := env.Kube.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// untouched checks that apportion changed nothing on the pods: no gate left,
// no decision, no node affinity of its own.
func untouched(t *testing.T, ps []placed) {
	t.Helper()
	for _, p := range ps {
		if decision.HasGate(&p.pod) || p.pod.Annotations[annotations.Group] != "" || p.pod.Annotations[annotations.Decision] != "" {
			t.Errorf("pod %s changed: gates %v, annotations %v", p.pod.Name, p.pod.Spec.SchedulingGates, p.pod.Annotations)
		}
		if a := p.pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
			t.Errorf("pod %s has node affinity %+v", p.pod.Name, a.NodeAffinity)
		}
	}
}

// placedBy checks that every pod carries apportion's decision for group.
func placedBy(t *testing.T, ps []placed, group string) {
	t.Helper()
	for _, p := range ps {
		if g := p.pod.Annotations[annotations.Group]; g != group {
			t.Errorf("pod %s (created %s) has group %q, want %q", p.pod.Name, p.pod.CreationTimestamp.Format(time.RFC3339), g, group)
		}
	}
}

func waitClusterStatus(t *testing.T, name, what string, ok func(v1alpha1.ClusterPlacementPolicyStatus) error) v1alpha1.ClusterPlacementPolicyStatus {
	t.Helper()
	var p v1alpha1.ClusterPlacementPolicy
	framework.WaitFor(t, 90*time.Second, "status of ClusterPlacementPolicy "+name+": "+what, func() error {
		if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: name}, &p); err != nil {
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

// TestClusterPolicy is a platform team's rollout of one
// ClusterPlacementPolicy over the namespaces labelled team=web: in shadow
// mode it records what it would do and changes nothing; switched to
// required, it sends every new pod of the workloads it covers to spot,
// except where the workload's own annotation or a PlacementPolicy of its
// namespace says otherwise, or the workload opts out; a namespace created
// afterwards is covered from its first pod; deleted, it stops placing new
// pods and leaves the running ones alone. Pods are counted by the labels of
// their nodes.
func TestClusterPolicy(t *testing.T) {
	a := framework.NewNamespace(t, env.Kube, framework.TestNamespaceName(t, "cp-a"), teamWeb)
	b := framework.NewNamespace(t, env.Kube, framework.TestNamespaceName(t, "cp-b"), teamWeb)
	cp := &v1alpha1.ClusterPlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-web-platform"},
		Spec: v1alpha1.ClusterPlacementPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: teamWeb},
			Target:            v1alpha1.ClusterTarget{Kinds: []string{"Deployment"}},
			Strategy:          *only(spot),
			Mode:              v1alpha1.ModeShadow,
		},
	}
	create(t, cp)
	t.Cleanup(func() { _ = env.Kube.Delete(context.Background(), cp) })
	spotGroup := ct + "=" + spot

	// Shadow: the pods are left as they are, the decision is recorded.
	early := deployment(b, "early", 3, nil)
	create(t, early)
	shadowed := waitRunning(t, b, "early", 3)
	untouched(t, shadowed)
	framework.WaitFor(t, 60*time.Second, "shadow decisions on the pods of early", func() error {
		for _, p := range livePods(t, b, "early") {
			if p.Annotations[annotations.Shadow] == "" {
				return fmt.Errorf("pod %s has no %s annotation", p.Name, annotations.Shadow)
			}
		}
		return nil
	})
	t.Logf("shadow: pods of early by node capacity type %v", countBy(shadowed))

	// Required from now on.
	framework.WaitFor(t, 30*time.Second, "switching the policy to required", func() error {
		var cur v1alpha1.ClusterPlacementPolicy
		if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(cp), &cur); err != nil {
			return err
		}
		cur.Spec.Mode = v1alpha1.ModeRequired
		return env.Kube.Update(t.Context(), &cur)
	})
	waitClusterStatus(t, cp.Name, "the required mode observed", func(v1alpha1.ClusterPlacementPolicyStatus) error { return nil })

	create(t, deployment(a, "web", 4, nil))
	create(t, deployment(a, "annotated", 3, map[string]string{annotations.Strategy: ct + "=" + onDemand + ",weight=1"}))
	create(t, deployment(a, "skipped", 3, map[string]string{annotations.Skip: "true"}))
	create(t, placementPolicy(b, "own", "own", only(onDemand)))
	create(t, deployment(b, "own", 3, nil))

	web := waitRunning(t, a, "web", 4)
	checkSplit(t, web, map[string]int{spot: 4})
	placedBy(t, web, spotGroup)
	checkSplit(t, waitRunning(t, a, "annotated", 3), map[string]int{onDemand: 3})
	checkSplit(t, waitRunning(t, b, "own", 3), map[string]int{onDemand: 3})
	skipped := waitRunning(t, a, "skipped", 3)
	untouched(t, skipped)
	for _, p := range skipped {
		if p.pod.Annotations[annotations.Shadow] != "" {
			t.Errorf("opted-out pod %s has a shadow decision", p.pod.Name)
		}
	}
	// The shadow pods are not moved.
	for _, p := range livePods(t, b, "early") {
		if decision.HasGate(&p) || p.Annotations[annotations.Group] != "" {
			t.Errorf("running shadow pod %s changed by the switch: %v", p.Name, p.Annotations)
		}
	}

	// A namespace created afterwards is covered from its first pod.
	c := framework.NewNamespace(t, env.Kube, framework.TestNamespaceName(t, "cp-c"), teamWeb)
	create(t, deployment(c, "late", 3, nil))
	late := waitRunning(t, c, "late", 3)
	checkSplit(t, late, map[string]int{spot: 3})
	placedBy(t, late, spotGroup)

	st := waitClusterStatus(t, cp.Name, "6 workloads covered, 3 placed (web, early, late), 3 namespaces, Ready", func(st v1alpha1.ClusterPlacementPolicyStatus) error {
		// a: web, annotated, skipped; b: early, own; c: late.
		if st.Matched != 6 || st.Placed != 3 || st.Namespaces != 3 {
			return fmt.Errorf("matched %d placed %d namespaces %d", st.Matched, st.Placed, st.Namespaces)
		}
		if c := meta(st, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %s: %s", c.Status, c.Message)
		}
		if c := meta(st, v1alpha1.ConditionConflict); c.Status != metav1.ConditionFalse {
			return fmt.Errorf("Conflict %s: %s", c.Status, c.Message)
		}
		return nil
	})
	t.Logf("status %+v", st)
	out, err := env.C.Command("kubectl", "get", "clusterplacementpolicies", "-o", "wide").CombinedOutput()
	if err != nil {
		t.Errorf("kubectl get clusterplacementpolicies: %v: %s", err, out)
	}
	t.Logf("kubectl get clusterplacementpolicies -o wide\n%s", out)
	for _, col := range []string{"PRIORITY", "MODE", "MATCHED", "PLACED", "READY", "CONFLICT"} {
		if !strings.Contains(string(out), col) {
			t.Errorf("kubectl get clusterplacementpolicies does not show the column %q", col)
		}
	}
	w := explainJSON[explain.WorkloadReport](t, "explain", "deployment/web", "-n", a)
	if w.Source != "ClusterPlacementPolicy "+cp.Name || w.Why == "" || !w.WithinQuota {
		t.Errorf("explain: source %q why %q within quota %v", w.Source, w.Why, w.WithinQuota)
	}
	w = explainJSON[explain.WorkloadReport](t, "explain", "deployment/own", "-n", b)
	if w.Source != "PlacementPolicy "+b+"/own" || !strings.Contains(w.Why, cp.Name) {
		t.Errorf("explain own: source %q why %q", w.Source, w.Why)
	}
	t.Logf("explain deployment/web:\n%s", kubectlApportion(t, "explain", "deployment/web", "-n", a))

	t.Run("deleting the policy stops placement and leaves running pods alone", func(t *testing.T) {
		before := map[types.UID]string{}
		for _, p := range web {
			before[p.pod.UID] = p.pod.Spec.NodeName
		}
		if err := env.Kube.Delete(t.Context(), cp); err != nil {
			t.Fatal(err)
		}
		framework.WaitFor(t, 30*time.Second, "the policy gone", func() error {
			var cur v1alpha1.ClusterPlacementPolicy
			if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(cp), &cur); err == nil {
				return fmt.Errorf("still there")
			}
			return nil
		})
		// The replicas' caches see the deletion within a moment.
		time.Sleep(3 * time.Second)
		scale(t, deployment(a, "web", 0, nil), 6)
		after := waitRunning(t, a, "web", 6)
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
		if len(fresh) != 2 {
			t.Fatalf("%d new pods, want 2", len(fresh))
		}
		untouched(t, fresh)
		for _, p := range after {
			if _, old := before[p.pod.UID]; old && p.pod.Annotations[annotations.Group] != spotGroup {
				t.Errorf("running pod %s lost its decision", p.pod.Name)
			}
		}
	})
}

func meta(st v1alpha1.ClusterPlacementPolicyStatus, typ string) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}
