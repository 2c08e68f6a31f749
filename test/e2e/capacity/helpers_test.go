//go:build e2e

package capacity_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

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

// newNamespace creates a namespace named after the test; Cleanup deletes it.
func newNamespace(t *testing.T) string {
	t.Helper()
	return framework.NewNamespace(t, env.Kube, "e2e-"+strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), nil)
}

// deployment is an nginx Deployment of the strategy whose pods select the
// case's NodePools and request cpu.
func deployment(ns, name, caseName string, replicas int32, cpu string, ann map[string]string) *appsv1.Deployment {
	if ann == nil {
		ann = map[string]string{}
	}
	ann[annotations.Strategy] = seed004
	spec := framework.AppPodSpec("public.ecr.aws/nginx/nginx:latest")
	spec.NodeSelector = map[string]string{caseLabel: caseName}
	spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	return framework.Deployment(ns, name, replicas, ann, spec)
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	framework.Create(t, env.Kube, obj)
}

// scale sets the Deployment's replicas, retrying on conflicts.
func scale(t *testing.T, d *appsv1.Deployment, replicas int32) {
	t.Helper()
	framework.Scale(t, env.Kube, client.ObjectKeyFromObject(d), replicas)
}

// livePods are the pods matching app=name that are not terminating.
func livePods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	return framework.LivePods(t, env.Kube, ns, name)
}

// waitRunning waits until the Deployment has exactly n live pods, all
// Running (so bound), and returns them.
func waitRunning(t *testing.T, ns, name string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	return framework.WaitPods(t, env.Kube, ns, name, n, timeout, "running", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != ""
	})
}

// nodeGroups maps each pod to the strategy group its node's labels carry
// (karpenter.sh/capacity-type=...), and checks the node is of the case.
func nodeGroups(t *testing.T, caseName string, pods []corev1.Pod) map[types.UID]string {
	t.Helper()
	out := map[types.UID]string{}
	for _, p := range pods {
		n := framework.NodeOf(t, env.Kube, &p)
		if n.Labels[caseLabel] != caseName {
			t.Errorf("pod %s runs on node %s of case %q, want %q", p.Name, n.Name, n.Labels[caseLabel], caseName)
		}
		out[p.UID] = karpv1.CapacityTypeLabelKey + "=" + n.Labels[karpv1.CapacityTypeLabelKey]
	}
	return out
}

// countByNode counts pods per group of their node.
func countByNode(t *testing.T, caseName string, pods []corev1.Pod) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, g := range nodeGroups(t, caseName, pods) {
		out[g]++
	}
	return out
}

// method parses spec and returns its apportioning method.
func method(t *testing.T, spec string) (*strategy.Strategy, *apportion.Method) {
	t.Helper()
	s, err := strategy.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := plan.Method(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

// quota checks counts against the ideal split of the suite's strategy
// (seed004) at their total (floor/ceil of each share, every group
// available) and describes them.
func quota(t *testing.T, counts map[string]int64) (string, bool) {
	t.Helper()
	s, m := method(t, seed004)
	ordered := make([]int64, len(s.Groups))
	var n, known int64
	for i, k := range s.Keys() {
		ordered[i] = counts[k]
		known += counts[k]
	}
	for _, c := range counts {
		n += c
	}
	if n != known || !m.WithinQuota(ordered, apportion.All) {
		return fmt.Sprintf("counts %v (n=%d, %d outside the groups) are off quota; ideal %v", counts, n, n-known, m.Shares(n, apportion.All)), false
	}
	return fmt.Sprintf("n=%d counts %v within quota (ideal %v)", n, counts, m.Shares(n, apportion.All)), true
}

// expected is the split the suite's strategy gives n pods from scratch.
func expected(t *testing.T, n int) map[string]int64 {
	t.Helper()
	s, _ := strategy.Parse(seed004)
	m, err := plan.Method(s)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for i, c := range m.Counts(n) {
		out[s.Keys()[i]] = c
	}
	return out
}

// record is a pod's decision record.
func record(t *testing.T, p corev1.Pod) decision.Record {
	t.Helper()
	var r decision.Record
	raw, ok := p.Annotations[annotations.Decision]
	if !ok {
		t.Fatalf("pod %s has no decision record", p.Name)
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("pod %s: decision record %q: %v", p.Name, raw, err)
	}
	return r
}

// eventsFor returns the Events with reason about object name in ns, waiting
// up to wait for at least one.
func eventsFor(t *testing.T, ns, name, reason string, wait time.Duration) []corev1.Event {
	t.Helper()
	return framework.Events(t, env.Kube, ns, wait, func(e *corev1.Event) bool {
		return e.InvolvedObject.Name == name && e.Reason == reason
	})
}

var untilRE = regexp.MustCompile(`until (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)`)

// outUntil reads the end of the outage from a CapacityUnavailable message.
func outUntil(t *testing.T, msg string) time.Time {
	t.Helper()
	m := untilRE.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("CapacityUnavailable message %q names no end of the outage", msg)
	}
	until, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		t.Fatal(err)
	}
	return until
}

// podLog records every pod of a namespace the API reports, from a watch:
// which pods were created, which deleted, and by the time of the event; and
// every NodePool a pod was ever pinned to.
type podLog struct {
	mu      sync.Mutex
	created map[types.UID]string
	deleted map[types.UID]string
	pinned  map[string]map[types.UID]string // NodePool -> pods pinned to it
	stop    func()
}

// watchPods starts recording the pods of ns until the test ends.
func watchPods(t *testing.T, ns string) *podLog {
	t.Helper()
	wc, err := client.NewWithWatch(env.C.RESTConfig(), client.Options{Scheme: env.Kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &podLog{created: map[types.UID]string{}, deleted: map[types.UID]string{}, pinned: map[string]map[types.UID]string{}, stop: cancel}
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			l.mu.Lock()
			l.created[p.UID] = p.Name
			if ev.Type == watch.Deleted || p.DeletionTimestamp != nil {
				l.deleted[p.UID] = p.Name
			}
			for _, pool := range pinnedTo(p) {
				if l.pinned[pool] == nil {
					l.pinned[pool] = map[types.UID]string{}
				}
				l.pinned[pool][p.UID] = p.Name
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); cancel(); <-done })
	return l
}

// Deleted returns the names of the pods deleted so far, sorted.
func (l *podLog) Deleted() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, n := range l.deleted {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// PinnedTo returns the names of the pods seen pinned to pool (by the
// apportion.dev/nodepool annotation or a required node affinity), sorted.
func (l *podLog) PinnedTo(pool string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, n := range l.pinned[pool] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// pinnedTo are the NodePools the pod is pinned to: its decision's, and any
// its required node affinity names.
func pinnedTo(p *corev1.Pod) []string {
	var out []string
	if pool := p.Annotations[annotations.NodePool]; pool != "" {
		out = append(out, pool)
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, r := range term.MatchExpressions {
				if r.Key == karpv1.NodePoolLabelKey && r.Operator == corev1.NodeSelectorOpIn {
					out = append(out, r.Values...)
				}
			}
		}
	}
	return out
}

// Created is the number of pods seen.
func (l *podLog) Created() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.created)
}

// waitDeletionCosts waits until every live pod carries the deletion cost the
// controller computes for the pods as they are now.
func waitDeletionCosts(t *testing.T, ns, app string) {
	t.Helper()
	s, err := strategy.Parse(seed004)
	if err != nil {
		t.Fatal(err)
	}
	framework.WaitFor(t, time.Minute, "up-to-date deletion costs on the pods of "+app, func() error {
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

// uids is the set of the pods' UIDs.
func uids(pods []corev1.Pod) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, p := range pods {
		out[p.UID] = true
	}
	return out
}

// names lists pod names, sorted.
func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// claimLaunches describes, for the NodeClaims of a NodePool, how long each
// took from creation to registration.
func claimLaunches(t *testing.T, pool string) []time.Duration {
	t.Helper()
	var list karpv1.NodeClaimList
	if err := env.Kube.List(t.Context(), &list, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for _, nc := range list.Items {
		for _, c := range nc.Status.Conditions {
			if c.Type == karpv1.ConditionTypeRegistered && c.Status == metav1.ConditionTrue {
				out = append(out, c.LastTransitionTime.Sub(nc.CreationTimestamp.Time))
			}
		}
	}
	return out
}

// pendingFor is how long a bound pod waited for a node: from its creation
// to its PodScheduled condition turning True.
func pendingFor(p corev1.Pod) time.Duration {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Sub(p.CreationTimestamp.Time)
		}
	}
	return 0
}

func round(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
