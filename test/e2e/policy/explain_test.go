//go:build e2e

package policy_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/test/framework"
)

const seed004Text = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// kubectlApportion runs `kubectl apportion ARGS` against the suite's
// cluster and returns its stdout.
func kubectlApportion(t *testing.T, args ...string) string {
	t.Helper()
	return env.KubectlApportion(t, args...)
}

func explainJSON[T any](t *testing.T, args ...string) T {
	t.Helper()
	var v T
	out := kubectlApportion(t, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("kubectl apportion %s -o json: %v:\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

// TestExplainAndStatus: `kubectl apportion explain` and `status` print the
// split the test counts by node labels, and a pod's decision as its
// annotations hold it.
func TestExplainAndStatus(t *testing.T) {
	ns := newNamespace(t)
	d := deployment(ns, "web", 10, map[string]string{annotations.Strategy: seed004Text})
	create(t, d)
	ps := waitRunning(t, ns, "web", 10)
	byNode := countBy(ps)
	checkSplit(t, ps, map[string]int{onDemand: 4, spot: 6})

	w := explainJSON[explain.WorkloadReport](t, "explain", "deployment/web", "-n", ns)
	if w.Strategy != seed004Text || w.Mode != annotations.ModeRequired || w.Replicas != 10 || w.Running != 10 || !w.WithinQuota || len(w.Drift) != 0 {
		t.Errorf("workload report: %+v", w)
	}
	decided := map[string]int64{}
	for _, p := range ps {
		decided[p.pod.Annotations[annotations.Group]]++
	}
	for i, capacity := range []string{onDemand, spot} {
		g := w.Groups[i]
		key := ct + "=" + capacity
		if g.Key != key || g.Actual != int64(byNode[capacity]) || g.Decided != decided[key] || g.Desired != []int64{4, 6}[i] || g.LeftOut != "" {
			t.Errorf("group %s: explain says %+v; by node labels %d running, %d decided", key, g, byNode[capacity], decided[key])
		}
	}
	if len(w.Next) != explain.NextPods {
		t.Errorf("next pods: %v", w.Next)
	}
	t.Logf("kubectl apportion explain deployment/web -n %s\n%s", ns, kubectlApportion(t, "explain", "deployment/web", "-n", ns))

	pod := ps[len(ps)-1]
	p := explainJSON[explain.PodReport](t, "explain", "pod/"+pod.pod.Name, "-n", ns)
	var seen int64
	if p.Decision != nil {
		for _, c := range p.Decision.Seen {
			seen += c.Count
		}
	}
	if p.State != explain.StatePlaced || p.Decision == nil || p.Decision.Group != pod.pod.Annotations[annotations.Group] ||
		p.Decision.NodePool != pod.pod.Annotations[annotations.NodePool] || p.NodeGroup != ct+"="+pod.capacity || p.Node != pod.pod.Spec.NodeName ||
		!p.Decision.Current || p.Decision.Reason != "quota" || seen > 9 || p.Workload == nil || p.Workload.Groups[0].Actual != int64(byNode[onDemand]) {
		t.Errorf("pod report of %s (on %s, group %s): %+v %+v", pod.pod.Name, pod.capacity, pod.pod.Annotations[annotations.Group], p, p.Decision)
	}
	t.Logf("kubectl apportion explain pod/%s -n %s\n%s", pod.pod.Name, ns, kubectlApportion(t, "explain", "pod/"+pod.pod.Name, "-n", ns))

	rows := explainJSON[[]explain.WorkloadReport](t, "status", "-n", ns)
	if len(rows) != 1 || rows[0].Name != "web" || rows[0].Groups[0].Actual != int64(byNode[onDemand]) || rows[0].Groups[1].Actual != int64(byNode[spot]) {
		t.Errorf("status -n %s: %+v", ns, rows)
	}
	table := kubectlApportion(t, "status", "-n", ns)
	t.Logf("kubectl apportion status -n %s\n%s", ns, table)
	if fields := strings.Fields(strings.Split(strings.TrimSpace(table), "\n")[1]); len(fields) < 9 ||
		fields[1] != "deployment/web" || fields[5] != "4/6" || fields[7] != fmt.Sprintf("%d/%d", byNode[onDemand], byNode[spot]) || fields[8] != "✓" {
		t.Errorf("status row: %q", fields)
	}
}

// TestShadowMode: a 20-replica Deployment in shadow mode runs exactly as
// without apportion (no gate, affinity, toleration, decision or deletion
// cost on its pods) while each pod records the decision it would have had,
// and `kubectl apportion status` shows the split apportion would have made:
// the plan's at 20.
func TestShadowMode(t *testing.T) {
	ns := newNamespace(t)
	d := deployment(ns, "shadow", 20, map[string]string{annotations.Strategy: seed004Text, annotations.Mode: annotations.ModeShadow})
	create(t, d)
	ps := waitRunning(t, ns, "shadow", 20)
	var pods corev1.PodList
	framework.WaitFor(t, time.Minute, "a shadow decision on every pod", func() error {
		if err := env.Kube.List(t.Context(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": "shadow"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if !decision.HasShadow(&p) {
				return fmt.Errorf("pod %s has no %s yet", p.Name, annotations.Shadow)
			}
		}
		return nil
	})
	// The deletion-cost controller acts within a second of a pod event:
	// give it the chance to (wrongly) write.
	time.Sleep(3 * time.Second)
	if err := env.Kube.List(t.Context(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": "shadow"}); err != nil {
		t.Fatal(err)
	}
	shadowCounts := map[string]int64{}
	for _, p := range pods.Items {
		if len(p.Spec.SchedulingGates) > 0 || p.Spec.Affinity != nil || p.Spec.NodeSelector != nil {
			t.Errorf("pod %s changed: gates %v, affinity %v, nodeSelector %v", p.Name, p.Spec.SchedulingGates, p.Spec.Affinity, p.Spec.NodeSelector)
		}
		for _, tol := range p.Spec.Tolerations {
			if !strings.HasPrefix(tol.Key, "node.kubernetes.io/") { // the API server's defaults
				t.Errorf("pod %s has toleration %+v", p.Name, tol)
			}
		}
		for _, k := range append([]string{"controller.kubernetes.io/pod-deletion-cost"}, annotations.DecisionKeys...) {
			if _, ok := p.Annotations[k]; ok && k != annotations.Shadow {
				t.Errorf("pod %s carries %s", p.Name, k)
			}
		}
		sh, _ := decision.ReadShadow(&p)
		shadowCounts[sh.Group]++
	}
	s, err := compiled.Parse(seed004Text)
	if err != nil {
		t.Fatal(err)
	}
	want := s.Method.Counts(20)
	t.Logf("shadow decisions by group %v; the plan at 20: %v; running by node labels %v", shadowCounts, want, countBy(ps))

	rows := explainJSON[[]explain.WorkloadReport](t, "status", "-n", ns)
	if len(rows) != 1 || rows[0].Mode != annotations.ModeShadow || rows[0].Pods.Shadow != 20 || rows[0].Pods.Decided != 0 {
		t.Fatalf("status -n %s: %+v", ns, rows)
	}
	for i, g := range rows[0].Groups {
		if g.Shadow != want[i] || g.Shadow != shadowCounts[g.Key] || g.Desired != want[i] {
			t.Errorf("group %s: status says %d would be decided (desired %d), the pods record %d, the plan says %d", g.Key, g.Shadow, g.Desired, shadowCounts[g.Key], want[i])
		}
	}
	t.Logf("kubectl apportion status -n %s\n%s", ns, kubectlApportion(t, "status", "-n", ns))
	p := explainJSON[explain.PodReport](t, "explain", "pod/"+pods.Items[0].Name, "-n", ns)
	if p.State != explain.StateShadow || p.Decision == nil || !p.Decision.Shadow || p.Decision.Group == "" {
		t.Errorf("explain of a shadow pod: %+v", p)
	}
	t.Logf("kubectl apportion explain pod/%s -n %s\n%s", pods.Items[0].Name, ns, kubectlApportion(t, "explain", "pod/"+pods.Items[0].Name, "-n", ns))
}
