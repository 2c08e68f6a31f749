//go:build e2e

package policy_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/test/framework"
)

// cappedText caps on-demand at 2 pods; spot takes the rest.
const cappedText = ct + "=" + onDemand + ",weight=1,max=2:" + ct + "=" + spot + ",weight=1"

// TestCaps: a Deployment a ClusterPlacementPolicy places with on-demand
// capped at 2 is scaled 0 -> 13 -> 31 -> 9. At each size, once its pods
// run, they are counted by their nodes' labels: on-demand never holds more
// than 2, the split is within quota of the capped strategy, and the
// policy's status counts the workload within quota.
func TestCaps(t *testing.T) {
	selector := map[string]string{"e2e-caps": "capped"}
	ns := framework.NewNamespace(t, env.Kube, framework.TestNamespaceName(t, "caps"), selector)
	cp := &v1alpha1.ClusterPlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-caps"},
		Spec: v1alpha1.ClusterPlacementPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: selector},
			Strategy:          v1alpha1.Strategy{Text: cappedText},
			Mode:              v1alpha1.ModeRequired,
		},
	}
	create(t, cp)
	t.Cleanup(func() { _ = env.Kube.Delete(t.Context(), cp) })
	waitClusterStatus(t, cp.Name, "the policy seen", func(v1alpha1.ClusterPlacementPolicyStatus) error { return nil })
	s, err := compiled.Parse(cappedText)
	if err != nil {
		t.Fatal(err)
	}
	d := deployment(ns, "web", 0, nil)
	create(t, d)
	for _, n := range []int{13, 31, 9} {
		scale(t, d, int32(n))
		pods := waitRunning(t, ns, "web", n)
		counts := make([]int64, len(s.Strategy.Groups))
		for _, p := range pods {
			g, ok := s.Index[ct+"="+p.capacity]
			if !ok {
				t.Errorf("n=%d: pod %s on a node of no group (capacity type %q)", n, p.pod.Name, p.capacity)
				continue
			}
			counts[g]++
		}
		t.Logf("n=%d: on-demand %d, spot %d; the engine's counts at %d: %v", n, counts[0], counts[1], n, s.Method.CountsAt(int64(n), apportion.All))
		if counts[0] > 2 {
			t.Errorf("n=%d: %d pods on on-demand, over its cap of 2", n, counts[0])
		}
		if !s.Method.WithinQuota(counts, apportion.All) {
			t.Errorf("n=%d: split %v off quota; shares %v", n, counts, s.Method.Shares(int64(n), apportion.All))
		}
		waitClusterStatus(t, cp.Name, fmt.Sprintf("the workload within quota at %d", n), func(st v1alpha1.ClusterPlacementPolicyStatus) error {
			if st.Placed != 1 || st.WithinQuota != 1 || len(st.OffStrategy) != 0 {
				return fmt.Errorf("placed %d within quota %d off strategy %v", st.Placed, st.WithinQuota, st.OffStrategy)
			}
			return nil
		})
	}
	out, err := env.C.Command("kubectl", "get", "clusterplacementpolicies", cp.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get clusterplacementpolicies: %v: %s", err, out)
	}
	t.Logf("kubectl get clusterplacementpolicies %s\n%s", cp.Name, out)
	if !strings.Contains(string(out), "WITHINQUOTA") {
		t.Errorf("kubectl get clusterplacementpolicies does not show the column WITHINQUOTA")
	}
}
