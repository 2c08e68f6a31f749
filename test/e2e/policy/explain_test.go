//go:build e2e

package policy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/explain"
)

const seed004Text = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// kubectlApportion runs `kubectl apportion ARGS` (the apportion binary
// under the plugin's name on kubectl's PATH) with the cluster's
// kubeconfig and returns its stdout.
func kubectlApportion(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(env.Bin, filepath.Join(dir, "kubectl-apportion")); err != nil {
		t.Fatal(err)
	}
	cmd := env.C.Command("kubectl", append([]string{"apportion"}, args...)...)
	path := dir
	for _, kv := range cmd.Env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = dir + ":" + p
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl apportion %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
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
