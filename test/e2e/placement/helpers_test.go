//go:build e2e

package placement_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/controllers/deletioncost"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	seed004  = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	onDemand = "karpenter.sh/capacity-type=on-demand"
	spot     = "karpenter.sh/capacity-type=spot"
)

func newNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	return framework.NewNamespace(t, env.kube, framework.TestNamespaceName(t, "e2e"), labels)
}

func deployment(ns, name string, replicas int32, ann map[string]string, mutate ...func(*appsv1.Deployment)) *appsv1.Deployment {
	d := framework.Deployment(ns, name, replicas, ann, framework.AppPodSpec("public.ecr.aws/nginx/nginx:latest"))
	for _, m := range mutate {
		m(d)
	}
	return d
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	framework.Create(t, env.kube, obj)
}

func scale(t *testing.T, d *appsv1.Deployment, replicas int32) {
	t.Helper()
	updateDeployment(t, d, "scaling", func(cur *appsv1.Deployment) { cur.Spec.Replicas = ptr.To(replicas) })
}

// updateDeployment applies change to the current Deployment, retrying on
// conflicts with the controllers that write it too.
func updateDeployment(t *testing.T, d *appsv1.Deployment, what string, change func(*appsv1.Deployment)) {
	t.Helper()
	framework.UpdateDeployment(t, env.kube, client.ObjectKeyFromObject(d), what, change)
}

// livePods are the pods matching app=name that are not terminating.
func livePods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	return framework.LivePods(t, env.kube, ns, name)
}

// waitPods waits until the Deployment has n live pods, every one of which
// satisfies ready (described by what).
func waitPods(t *testing.T, ns, name string, n int, timeout time.Duration, what string, ready func(*corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	return framework.WaitPods(t, env.kube, ns, name, n, timeout, what, ready)
}

// waitDecided waits until n live pods exist and every one carries a decision.
func waitDecided(t *testing.T, ns, name string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	return waitPods(t, ns, name, n, timeout, "decided", func(p *corev1.Pod) bool {
		return decision.Decided(p) && !decision.HasGate(p)
	})
}

// waitRunning waits until n live pods are Running.
func waitRunning(t *testing.T, ns, name string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	return waitPods(t, ns, name, n, timeout, "running", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning
	})
}

func groupCounts(pods []corev1.Pod) map[string]int64 {
	out := map[string]int64{}
	for _, p := range pods {
		out[p.Annotations[annotations.Group]]++
	}
	return out
}

// checkQuota asserts the counts are within floor/ceil of the ideal shares of
// the suite's strategy at their total, every group available, and logs them.
func checkQuota(t *testing.T, counts map[string]int64, what string) {
	t.Helper()
	if msg, ok := quota(t, counts); !ok {
		t.Errorf("%s: %s", what, msg)
	} else {
		t.Logf("%s: %s", what, msg)
	}
}

// quota checks counts against the suite's strategy and describes the result.
func quota(t *testing.T, counts map[string]int64) (string, bool) {
	t.Helper()
	s, err := strategy.Parse(seed004)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := plan.Method(s)
	ordered := make([]int64, len(s.Groups))
	var n int64
	for i, k := range s.Keys() {
		ordered[i] = counts[k]
		n += counts[k]
	}
	var extra int64
	for k, c := range counts {
		if !strings.Contains(strings.Join(s.Keys(), "|"), k) {
			extra += c
		}
	}
	if extra > 0 || !m.WithinQuota(ordered, apportion.All) {
		return fmt.Sprintf("counts %v (n=%d, %d pods outside the groups) are off quota; ideal %v", counts, n, extra, m.Shares(n, apportion.All)), false
	}
	return fmt.Sprintf("n=%d counts %v within quota", n, counts), true
}

// decisionRec is one pod's decision record: the counts it saw (by group, in
// strategy order), the strays it counted, their total and its group.
type decisionRec struct {
	seen   []int64
	strays []int64
	total  int64
	group  string
}

// decisionRecords reads the pods' decision records, in the order they were
// made (by the number of pods each saw).
func decisionRecords(t *testing.T, pods []corev1.Pod) []decisionRec {
	t.Helper()
	var recs []decisionRec
	for _, p := range pods {
		var r decision.Record
		if err := json.Unmarshal([]byte(p.Annotations[annotations.Decision]), &r); err != nil {
			t.Fatalf("pod %s: decision record %q: %v", p.Name, p.Annotations[annotations.Decision], err)
		}
		var total int64
		for _, c := range r.Counts {
			total += c
		}
		recs = append(recs, decisionRec{seen: r.Counts, strays: r.Strays, total: total, group: p.Annotations[annotations.Group]})
	}
	sort.Slice(recs, func(a, b int) bool { return recs[a].total < recs[b].total })
	return recs
}

// checkDecisionOrder replays the decisions in the order the controller made
// them (each record holds the counts it saw): the counts seen must be exactly
// the decisions before it, and every prefix must be within quota.
func checkDecisionOrder(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	s, _ := strategy.Parse(seed004)
	keys := s.Keys()
	recs := decisionRecords(t, pods)
	running := map[string]int64{}
	var lastStrays []int64
	for i, r := range recs {
		if r.total != int64(i) {
			t.Fatalf("decision %d saw %d pods: decisions were not made one at a time against exact counts (%v)", i+1, r.total, r.seen)
		}
		for gi, k := range keys {
			if r.seen[gi] != running[k] {
				t.Fatalf("decision %d saw %v, but the decisions before it were %v", i+1, r.seen, running)
			}
		}
		running[r.group]++
		if r.strays != nil {
			// Pods admitted without a decision (strays) count in the group
			// of their node, where the scheduler put them: they can take
			// the split off quota by more than one decision repairs, and
			// the decisions after them compensate. Checked at the end.
			lastStrays = r.strays
			continue
		}
		if lastStrays != nil {
			continue
		}
		if msg, ok := quota(t, running); !ok {
			t.Fatalf("after decision %d: %s", i+1, msg)
		}
	}
	if lastStrays != nil {
		split := map[string]int64{}
		for k, n := range running {
			split[k] = n
		}
		for gi, n := range lastStrays {
			split[keys[gi]] += n
		}
		if msg, ok := quota(t, split); !ok {
			t.Fatalf("after the last decision, with the strays it counted %v: %s", lastStrays, msg)
		}
		t.Logf("decision order: the strays %v were compensated: decided %v plus strays is within quota", lastStrays, running)
	}
	t.Logf("decision order: %d decisions, each against exact counts, every prefix within quota", len(recs))
}

// checkDecisionsWithGone checks the decisions of a burst of which gone pods
// left during it (deleted, and replaced by the ReplicaSet controller): the
// exact replay of checkDecisionOrder cannot hold then, since the decisions
// counted a gone pod until it left and its record left with it. Each
// decision must still have seen the decisions before it give or take the
// gone pods, group by group, and kept the split within quota by its own
// counts.
func checkDecisionsWithGone(t *testing.T, pods []corev1.Pod, gone int) {
	t.Helper()
	s, _ := strategy.Parse(seed004)
	keys := s.Keys()
	running := map[string]int64{}
	d := int64(gone)
	strays := false
	for i, r := range decisionRecords(t, pods) {
		if r.total < int64(i)-d || r.total > int64(i)+d {
			t.Fatalf("decision %d saw %d pods, but %d were decided before it and %d left", i+1, r.total, i, gone)
		}
		after := map[string]int64{}
		for gi, k := range keys {
			if diff := r.seen[gi] - running[k]; diff < -d || diff > d {
				t.Fatalf("decision %d saw %v, but the decisions before it were %v and %d pods left", i+1, r.seen, running, gone)
			}
			after[k] = r.seen[gi]
		}
		after[r.group]++
		running[r.group]++
		// Once strays are counted, the decisions after them compensate
		// over several pods, as in checkDecisionOrder.
		if strays = strays || r.strays != nil; strays {
			continue
		}
		if msg, ok := quota(t, after); !ok {
			t.Fatalf("decision %d, by its own counts: %s", i+1, msg)
		}
	}
	t.Logf("decision order, %d pods gone during the burst: every decision saw the ones before it within %d, and kept its counts within quota", gone, gone)
}

// eventsFor returns the messages of the Events with reason (any when "")
// on object name in ns, waiting up to wait for at least one.
func eventsFor(t *testing.T, ns, name, reason string, wait time.Duration) []string {
	t.Helper()
	return framework.Messages(framework.Events(t, env.kube, ns, wait, func(e *corev1.Event) bool {
		return e.InvolvedObject.Name == name && (reason == "" || e.Reason == reason)
	}))
}

func nodeOf(t *testing.T, p corev1.Pod) *corev1.Node {
	t.Helper()
	return framework.NodeOf(t, env.kube, &p)
}

// waitDeletionCosts waits until every live pod of app carries the deletion
// cost the controller computes for the pods as they are now: a cost written
// before the last pods were decided may be out of date.
func waitDeletionCosts(t *testing.T, ns, app, spec string) {
	t.Helper()
	s, err := strategy.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "up-to-date deletion costs on the pods of "+app, func() error {
		live := livePods(t, ns, app)
		pods := make([]*corev1.Pod, len(live))
		for i := range live {
			pods[i] = &live[i]
		}
		want, err := deletioncost.Costs(s, pods)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if got := p.Annotations[deletioncost.Annotation]; got != strconv.Itoa(want[p.UID]) {
				return fmt.Errorf("pod %s has deletion cost %q, want %d", p.Name, got, want[p.UID])
			}
		}
		return nil
	})
}
