package explain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const (
	odSpot   = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	odKey    = "karpenter.sh/capacity-type=on-demand"
	spotKey  = "karpenter.sh/capacity-type=spot"
	ns       = "shop"
	capLabel = "karpenter.sh/capacity-type"
)

// fixture is a Deployment shop/web (10 replicas) with its current
// ReplicaSet web-new (hash "new") and an older one web-old, two NodePools
// and two nodes.
type fixture struct {
	objs   []client.Object
	deploy *appsv1.Deployment
	cur    *appsv1.ReplicaSet
	old    *appsv1.ReplicaSet
	n      int
}

func newFixture(deployAnnotations map[string]string, spotTaint bool) *fixture {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "deploy-uid", Annotations: deployAnnotations},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(10)), Selector: sel,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}}}}
	rs := func(name, hash, rev string) *appsv1.ReplicaSet {
		r := test.ReplicaSet(metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name + "-uid"),
			Labels:      map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: hash},
			Annotations: map[string]string{"deployment.kubernetes.io/revision": rev}}, d)
		r.Spec.Selector = sel
		return r
	}
	spot := test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: "spot"}, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(capLabel, "spot")}})
	if spotTaint {
		spot.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	}
	f := &fixture{deploy: d, cur: rs("web-new", "new", "2"), old: rs("web-old", "old", "1")}
	f.objs = []client.Object{d, f.cur, f.old, spot,
		test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: "od"}, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(capLabel, "on-demand")}}),
		test.Node("od-1", map[string]string{capLabel: "on-demand"}),
		test.Node("spot-1", map[string]string{capLabel: "spot"}),
		test.Node("other-1", map[string]string{"team": "x"}),
	}
	return f
}

// pod adds a pod of rs; node "" leaves it Pending.
func (f *fixture) pod(rs *appsv1.ReplicaSet, node, group string, extra map[string]string) *corev1.Pod {
	f.n++
	phase := corev1.PodRunning
	if node == "" {
		phase = corev1.PodPending
	}
	p := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-%d", f.n), UID: types.UID(fmt.Sprintf("pod-%d", f.n)),
		Labels:            map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]},
		CreationTimestamp: metav1.Unix(int64(1000+f.n), 0)}, Owner: rs, NodeName: node, Phase: phase, Group: group})
	if _, value, ok := strings.Cut(group, "="); ok {
		// Pinned as a decision pins: to its group and NodePool.
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: capLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{value}},
				{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{map[string]string{"spot": "spot", "on-demand": "od"}[value]}},
			}}}}}}
	}
	for k, v := range extra {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
	f.objs = append(f.objs, p)
	return p
}

func (f *fixture) cluster(t *testing.T) *Cluster {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(f.objs...).Build()
	return &Cluster{Reader: c, Capacity: &capacity.NodePoolCapacity{Reader: c}, NodePools: true, Policies: true}
}

// TestWorkloadReport: a Deployment with decided pods, a stray, a waiting
// pod and a pod of an older revision.
func TestWorkloadReport(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odSpot}, false)
	for range 4 {
		f.pod(f.cur, "od-1", odKey, nil)
	}
	for range 5 {
		f.pod(f.cur, "spot-1", spotKey, nil)
	}
	f.pod(f.cur, "spot-1", "", nil)                                                                                // a stray
	f.pod(f.cur, "", "", nil).Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}} // waiting
	f.pod(f.old, "od-1", odKey, map[string]string{annotations.Fallback: spotKey})                                  // older revision, a fallback
	r, err := f.cluster(t).Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if r.NotPlaced != "" || r.Revision != "new" || r.Mode != annotations.ModeRequired || !strings.Contains(r.Source, "metadata.annotations[apportion.dev/strategy]") {
		t.Fatalf("strategy, source, mode, revision: %+v", r)
	}
	if r.Replicas != 10 || r.Running != 11 {
		t.Fatalf("replicas 10, running 11 (10 of this revision, 1 older): %+v", r)
	}
	want := []struct{ desired, actual, decided, strays int64 }{{4, 5, 4, 0}, {6, 6, 5, 1}}
	for i, w := range want {
		g := r.Groups[i]
		if g.Desired != w.desired || g.Actual != w.actual || g.Decided != w.decided || g.Strays != w.strays || g.LeftOut != "" {
			t.Errorf("group %d: got %+v, want %+v", i, g, w)
		}
	}
	if r.Groups[0].NodePool != "od" || r.Groups[1].NodePool != "spot" {
		t.Errorf("pools: %+v", r.Groups)
	}
	// At 11 running on-demand's share is 2 + 9/4: 4-5; 5 is within.
	if !r.WithinQuota || len(r.Drift) != 0 {
		t.Errorf("5/6 at 11 is within quota: %+v", r)
	}
	if p := r.Pods; p.Live != 12 || p.Decided != 10 || p.Strays != 1 || p.Waiting != 1 || p.Fallback != 1 || p.OtherRevisions != 1 {
		t.Errorf("pod counts: %+v", p)
	}
	checkNext(t, r, []int64{4, 6})
}

// checkNext: the next pods, added one at a time to the revision's counts
// (decided and strays), stay within quota at every size.
func checkNext(t *testing.T, r *WorkloadReport, counts []int64) {
	t.Helper()
	s, err := compiled.Parse(r.Strategy)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Next) != NextPods {
		t.Fatalf("next: %v", r.Next)
	}
	for _, k := range r.Next {
		i, ok := s.Index[k]
		if !ok {
			t.Fatalf("next names no group: %q", k)
		}
		counts[i]++
		if !s.Method.WithinQuota(counts, apportion.All) {
			t.Fatalf("next pods leave the quota at %v: %v", counts, r.Next)
		}
	}
}

// TestWorkloadLeftOut: a spot pool tainted without the opt-in leaves the
// spot group out; every pod runs on on-demand: drift, with the reason.
func TestWorkloadLeftOut(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odSpot}, true)
	for range 10 {
		f.pod(f.cur, "od-1", odKey, nil)
	}
	r, err := f.cluster(t).Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	g := r.Groups[1]
	if g.LeftOut == "" || g.NodePool != "" || !strings.Contains(g.LeftOut, "spot") {
		t.Fatalf("spot is left out, naming the pool: %+v", g)
	}
	if r.Groups[0].Desired != 10 || r.Groups[0].Actual != 10 {
		t.Fatalf("over the served group alone, 10 on-demand: %+v", r.Groups[0])
	}
	if len(r.Drift) != 1 || !strings.Contains(r.Drift[0], "group 2 (karpenter.sh/capacity-type=spot) is left out") {
		t.Fatalf("drift: %q", r.Drift)
	}
	for _, k := range r.Next {
		if k != odKey {
			t.Fatalf("with spot left out, the next pods go on-demand: %v", r.Next)
		}
	}
}

// TestWorkloadLeftOutForATypo: a group whose label key no NodePool names and
// no node carries is left out with that key named first.
func TestWorkloadLeftOutForATypo(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-tpye=spot,weight=3"}, false)
	r, err := f.cluster(t).Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	const want = `label key "karpenter.sh/capacity-tpye" is on no NodePool and no node (a typo?); no NodePool can serve the group: `
	if g := r.Groups[1]; !strings.HasPrefix(g.LeftOut, want) {
		t.Fatalf("group 2 left out for %q, want it to start with %s", g.LeftOut, want)
	}
	if r.Groups[0].LeftOut != "" {
		t.Fatalf("group 1 left out: %q", r.Groups[0].LeftOut)
	}
}

// TestWorkloadOutsideQuota: every pod on on-demand with both groups served.
func TestWorkloadOutsideQuota(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odSpot}, false)
	for range 9 {
		f.pod(f.cur, "od-1", "", nil) // strays: admitted without a decision
	}
	f.pod(f.cur, "other-1", "", nil)
	r, err := f.cluster(t).Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if r.WithinQuota || len(r.Drift) != 3 || r.Unmatched != 1 {
		t.Fatalf("9 on on-demand and 1 elsewhere are off the strategy: %+v", r)
	}
	if !strings.Contains(r.Drift[0], "group 1 (karpenter.sh/capacity-type=on-demand) has 9 running, its quota at 9 running is 3-4") ||
		!strings.Contains(r.Drift[1], "group 2 (karpenter.sh/capacity-type=spot) has 0 running, its quota at 9 running is 5-6") ||
		!strings.Contains(r.Drift[2], "1 running on nodes of no group") {
		t.Fatalf("drift: %q", r.Drift)
	}
	// The strays count: the next pods repair the split.
	if r.Next[0] != spotKey {
		t.Fatalf("next: %v", r.Next)
	}
}

// TestWorkloadShadow: pods carrying shadow decisions, mode from the pods.
func TestWorkloadShadow(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odSpot}, false)
	for i, g := range []string{odKey, odKey, spotKey, spotKey, spotKey} {
		sh := decision.Shadow{Group: g, NodePool: "x", Record: &decision.Record{Counts: []int64{int64(min(i, 2)), int64(max(i-2, 0))}, Reason: "quota"}}
		f.pod(f.cur, "od-1", "", map[string]string{annotations.Shadow: sh.String()})
	}
	r, err := f.cluster(t).Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != annotations.ModeShadow || r.ModeSource != "" || len(r.Drift) != 0 {
		t.Fatalf("mode shadow from the pods, no drift reported: %+v", r)
	}
	if r.Groups[0].Shadow != 2 || r.Groups[1].Shadow != 3 || r.Groups[0].Actual != 5 || r.Pods.Shadow != 5 || r.Pods.Strays != 0 {
		t.Fatalf("shadow 2/3, running 5/0: %+v %+v", r.Groups, r.Pods)
	}
	checkNext(t, r, []int64{2, 3})
}

// TestWorkloadLeftShadowMode: a workload switched to required without a
// rollout still runs its shadow pods, all on on-demand: they count there as
// strays, and the next pods go to spot.
func TestWorkloadLeftShadowMode(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odSpot, annotations.Mode: annotations.ModeRequired}, false)
	for i, g := range []string{odKey, odKey, spotKey, spotKey, spotKey} {
		sh := decision.Shadow{Group: g, NodePool: "x", Record: &decision.Record{Counts: []int64{int64(min(i, 2)), int64(max(i-2, 0))}, Reason: "quota"}}
		f.pod(f.cur, "od-1", "", map[string]string{annotations.Shadow: sh.String()})
	}
	f.pod(f.cur, "", "", map[string]string{annotations.Shadow: decision.Shadow{Group: spotKey, NodePool: "x"}.String()}) // not bound yet: counts nowhere
	r, err := f.cluster(t).Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Groups[0].Strays != 5 || r.Groups[1].Strays != 0 || r.Groups[0].Shadow != 0 || r.Groups[1].Shadow != 0 {
		t.Fatalf("the bound shadow pods are 5 on-demand strays: %+v", r.Groups)
	}
	if r.Next[0] != spotKey || r.Next[1] != spotKey || r.Next[2] != spotKey {
		t.Fatalf("next %v: want spot first, where the split is short", r.Next)
	}
}

// TestWorkloadNoStrategy and a policy's strategy and mode.
func TestWorkloadStrategySources(t *testing.T) {
	f := newFixture(nil, false)
	f.pod(f.cur, "od-1", "", nil)
	r, err := f.cluster(t).Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.NotPlaced, "no strategy") || r.Pods.Live != 1 {
		t.Fatalf("no strategy: %+v", r)
	}
	pol := test.PlacementPolicy(metav1.ObjectMeta{Namespace: ns, Name: "half"}, policySpec(t, odSpot))
	pol.Spec.Mode = "preferred"
	f.objs = append(f.objs, pol)
	r, err = f.cluster(t).Workload(context.Background(), Ref{Kind: "ReplicaSet", Namespace: ns, Name: "web-new"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != "Deployment" || r.Source != "PlacementPolicy shop/half" || r.Mode != "preferred" || r.NotPlaced != "" || r.Strategy == "" {
		t.Fatalf("a ReplicaSet is read as its Deployment, placed by the policy: %+v", r)
	}
	f.deploy.Spec.Template.Annotations = map[string]string{annotations.Mode: "required"}
	r, err = f.cluster(t).Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != "required" || !strings.Contains(r.ModeSource, "spec.template") {
		t.Fatalf("the template's mode wins: %+v", r)
	}
}

// TestPodReport: a decided pod's record, node group and architectures.
func TestPodReport(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odSpot}, false)
	s, _ := compiled.Parse(odSpot)
	rec, _ := json.Marshal(decision.Record{Strategy: s.Hash, Revision: "new", Counts: []int64{2, 3}, Strays: []int64{0, 1}, Reason: "quota"})
	p := f.pod(f.cur, "spot-1", spotKey, map[string]string{annotations.Decision: string(rec), annotations.NodePool: "spot", annotations.Architectures: "amd64,arm64"})
	p.Spec.Containers = []corev1.Container{{Name: "web", Image: "nginx:1.27"}}
	stray := f.pod(f.cur, "od-1", "", nil)
	r, err := f.cluster(t).Pod(context.Background(), ns, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	d := r.Decision
	if r.State != StatePlaced || d == nil || d.Group != spotKey || d.NodePool != "spot" || d.Reason != "quota" || !d.Current || d.Revision != "new" {
		t.Fatalf("decision: %+v %+v", r, d)
	}
	if len(d.Seen) != 2 || d.Seen[0] != (GroupCount{odKey, 2}) || d.Seen[1] != (GroupCount{spotKey, 3}) || d.Strays[1] != (GroupCount{spotKey, 1}) {
		t.Fatalf("counts seen: %+v strays %+v", d.Seen, d.Strays)
	}
	if r.NodeGroup != spotKey || strings.Join(r.Architectures, ",") != "amd64,arm64" || r.Images[0] != "nginx:1.27" || r.Workload == nil || r.Workload.Name != "web" {
		t.Fatalf("node group, architectures, images, workload: %+v", r)
	}
	r, err = f.cluster(t).Pod(context.Background(), ns, stray.Name)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != StateNotPlaced || !strings.Contains(r.Why, "stray") || r.NodeGroup != odKey || len(r.Architectures) != 0 {
		t.Fatalf("a stray: %+v", r)
	}
}

// TestStatus lists the workloads with a strategy only.
func TestStatus(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odSpot}, false)
	f.pod(f.cur, "od-1", odKey, nil)
	other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain", UID: "plain-uid"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "plain"}}}}
	elsewhere := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "pg", UID: "pg-uid"},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pg"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotations.Strategy: "kubernetes.io/arch=arm64,weight=1:kubernetes.io/arch=amd64,weight=1"}}}}}
	f.objs = append(f.objs, other, elsewhere)
	cl := f.cluster(t)
	all, err := cl.Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Namespace != "db" || all[0].Kind != "StatefulSet" || all[1].Name != "web" {
		t.Fatalf("status -A: %+v", all)
	}
	one, err := cl.Status(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 1 || one[0].Name != "web" || one[0].Groups[0].Decided != 1 {
		t.Fatalf("status -n shop: %+v", one)
	}
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Ref
	}{
		{[]string{"deploy/web"}, Ref{"Deployment", "n", "web"}},
		{[]string{"pod", "web-1"}, Ref{"Pod", "n", "web-1"}},
		{[]string{"sts/db"}, Ref{"StatefulSet", "n", "db"}},
		{[]string{"deployments.apps/web"}, Ref{"Deployment", "n", "web"}},
		{[]string{"Rollout/canary"}, Ref{"Rollout", "n", "canary"}},
	} {
		got, err := ParseRef(tc.args, "n")
		if err != nil || got != tc.want {
			t.Errorf("%v: got %+v, %v", tc.args, got, err)
		}
	}
	for _, bad := range [][]string{{"web"}, {"daemonset/x"}, {"pod/"}, {"pod/a/b"}, {"a", "b", "c"}} {
		if _, err := ParseRef(bad, "n"); !errors.Is(err, ErrUsage) {
			t.Errorf("%v: want a usage error, got %v", bad, err)
		}
	}
}

// policySpec targets the Deployment web with raw in the string syntax.
func policySpec(t *testing.T, raw string) v1alpha1.PlacementPolicySpec {
	t.Helper()
	return v1alpha1.PlacementPolicySpec{Target: v1alpha1.Target{Kind: "Deployment", Name: "web"}, Strategy: &v1alpha1.Strategy{Text: raw}}
}

// TestStatusListsOncePerNamespace: status over three Deployments of a
// namespace lists its pods once and its ReplicaSets once, and reports each
// workload with its own pods.
func TestStatusListsOncePerNamespace(t *testing.T) {
	var objs []client.Object
	for i, name := range []string{"a", "b", "c"} {
		f := newFixture(map[string]string{annotations.Strategy: odSpot}, false)
		sel := map[string]string{"app": name}
		f.deploy.Name, f.deploy.UID = name, types.UID(name+"-uid")
		f.deploy.Spec.Selector.MatchLabels, f.deploy.Spec.Template.Labels = sel, sel
		f.cur.Name, f.cur.UID, f.cur.Labels["app"] = name+"-new", types.UID(name+"-new-uid"), name
		f.cur.OwnerReferences[0].Name, f.cur.OwnerReferences[0].UID = name, f.deploy.UID
		f.cur.Spec.Selector = f.deploy.Spec.Selector
		f.objs = []client.Object{f.deploy, f.cur}
		if i == 0 {
			f.objs = append(f.objs, newFixture(nil, false).objs[3:]...) // the pools and nodes, once
		}
		for range i + 1 {
			f.pod(f.cur, "od-1", odKey, nil).Labels["app"] = name
		}
		for _, o := range f.objs {
			if p, ok := o.(*corev1.Pod); ok {
				p.Name, p.UID = name+"-"+p.Name, types.UID(name+"-"+string(p.UID))
			}
		}
		objs = append(objs, f.objs...)
	}
	lists := map[string]int{}
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists[fmt.Sprintf("%T", list)]++
			return c.List(ctx, list, opts...)
		},
	}).Build()
	cl := &Cluster{Reader: c, Capacity: &capacity.NodePoolCapacity{Reader: c}, NodePools: true}
	reports, err := cl.Status(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 3 {
		t.Fatalf("three workloads: %+v", reports)
	}
	for i, r := range reports {
		if r.Pods.Live != int64(i+1) || r.Groups[0].Decided != int64(i+1) {
			t.Errorf("%s: %d live, %d decided; want %d", r.Name, r.Pods.Live, r.Groups[0].Decided, i+1)
		}
	}
	if lists["*v1.PodList"] != 1 || lists["*v1.ReplicaSetList"] != 1 {
		t.Errorf("List requests: %v; want one of pods and one of ReplicaSets", lists)
	}
}

// TestWorkloadClusterPolicy: explain names the ClusterPlacementPolicy that
// places a workload and why (its rank, a tie), says what a PlacementPolicy
// or the workload's annotation wins over, and that status lists the
// workloads a cluster policy places.
func TestWorkloadClusterPolicy(t *testing.T) {
	cp := func(name string, age time.Duration, priority int32) *v1alpha1.ClusterPlacementPolicy {
		return &v1alpha1.ClusterPlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Now().Add(-age))},
			Spec: v1alpha1.ClusterPlacementPolicySpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
				Strategy: v1alpha1.Strategy{Text: odSpot}, Mode: v1alpha1.ModeShadow, Priority: priority}}
	}
	explainWeb := func(t *testing.T, f *fixture) *WorkloadReport {
		t.Helper()
		cl := f.cluster(t)
		cl.ClusterPolicies = true
		r, err := cl.Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "web"}}}

	f := newFixture(nil, false)
	f.objs = append(f.objs, namespace, cp("platform", time.Hour, 5), cp("newer", time.Minute, 5), cp("low", 2*time.Hour, 1))
	r := explainWeb(t, f)
	if r.Source != "ClusterPlacementPolicy platform" || r.Mode != "shadow" || r.NotPlaced != "" || r.Strategy == "" ||
		!strings.Contains(r.Why, "ties with ClusterPlacementPolicy newer (priority 5)") || !strings.Contains(r.Why, "over ClusterPlacementPolicy low (priority 1)") {
		t.Fatalf("cluster policy: %+v", r)
	}
	cl := f.cluster(t)
	cl.ClusterPolicies = true
	all, err := cl.Status(context.Background(), "")
	if err != nil || len(all) != 1 || all[0].Source != "ClusterPlacementPolicy platform" {
		t.Fatalf("status -A lists %d workloads (%v): want web from ClusterPlacementPolicy platform", len(all), err)
	}

	f.objs = append(f.objs, test.PlacementPolicy(metav1.ObjectMeta{Namespace: ns, Name: "own"}, policySpec(t, odSpot)))
	if r := explainWeb(t, f); r.Source != "PlacementPolicy shop/own" || !strings.Contains(r.Why, "wins over ClusterPlacementPolicies platform (priority 5)") {
		t.Fatalf("namespaced policy: %+v", r)
	}

	f = newFixture(map[string]string{annotations.Strategy: odSpot}, false)
	f.objs = append(f.objs, namespace, cp("platform", time.Hour, 5))
	if r := explainWeb(t, f); !strings.Contains(r.Source, "annotations") || r.Why != "its own annotation wins over ClusterPlacementPolicy platform (priority 5)" {
		t.Fatalf("annotation: %+v", r)
	}
}

// TestWorkloadCaps: every group capped below the replica count: Desired
// stops at the caps, the pods past them are reported beyond caps, the one
// running on a node of no group is one of them (no drift), and the next pods
// are beyond caps too.
func TestWorkloadCaps(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odKey + ",weight=1,max=2:" + spotKey + ",weight=1,max=3"}, false)
	for range 2 {
		f.pod(f.cur, "od-1", odKey, nil)
	}
	for range 3 {
		f.pod(f.cur, "spot-1", spotKey, nil)
	}
	f.pod(f.cur, "other-1", "", nil) // released beyond caps
	r, err := f.cluster(t).Workload(context.Background(), Ref{Kind: "Deployment", Namespace: ns, Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Groups[0].Desired != 2 || r.Groups[0].Cap != 2 || r.Groups[1].Desired != 3 || r.Groups[1].Cap != 3 || r.BeyondCaps != 5 {
		t.Errorf("desired 2 (cap 2) and 3 (cap 3), 5 beyond caps at 10 replicas: %+v", r)
	}
	if !r.WithinQuota || len(r.Drift) != 0 {
		t.Errorf("one pod beyond caps on a node of no group is no drift: %+v", r)
	}
	if len(r.Next) != NextPods || r.Next[0] != NextBeyondCaps {
		t.Errorf("next: %v, want beyond caps", r.Next)
	}
}

// TestBatchReports: a CronJob's Job takes its strategy from the CronJob
// unless its pod template has one, and is split over its live pods; a
// Workflow's comes from its spec.podMetadata, and its pods are found by
// Argo's label.
func TestBatchReports(t *testing.T) {
	f := newFixture(nil, false)
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly", UID: "cron-uid",
		Annotations: map[string]string{annotations.Strategy: odSpot, annotations.Mode: "preferred"}}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "job-uid"}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly-1", UID: "job-uid",
		OwnerReferences: test.OwnedBy("batch/v1", "CronJob", "nightly", "cron-uid")},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4), Selector: sel}}
	f.objs = append(f.objs, cron, job)
	for i, phase := range []corev1.PodPhase{corev1.PodRunning, corev1.PodRunning, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed} {
		node, group := "od-1", odKey
		if i == 2 {
			node, group = "spot-1", spotKey
		}
		f.objs = append(f.objs, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("nightly-1-%d", i), UID: types.UID(fmt.Sprintf("job-pod-%d", i)),
			Labels: sel.MatchLabels, OwnerReferences: test.OwnedBy("batch/v1", "Job", "nightly-1", "job-uid")}, NodeName: node, Phase: phase, Group: group}))
	}
	wf := &unstructured.Unstructured{}
	wf.SetGroupVersionKind(workload.WorkflowGVK)
	wf.SetNamespace(ns)
	wf.SetName("etl")
	wf.SetUID("wf-uid")
	if err := unstructured.SetNestedStringMap(wf.Object, map[string]string{annotations.Strategy: odSpot}, "spec", "podMetadata", "annotations"); err != nil {
		t.Fatal(err)
	}
	f.objs = append(f.objs, wf, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "etl-step", UID: "wf-pod",
		Labels: map[string]string{"workflows.argoproj.io/workflow": "etl"}, OwnerReferences: test.OwnedBy("argoproj.io/v1alpha1", "Workflow", "etl", "wf-uid")},
		NodeName: "spot-1", Phase: corev1.PodRunning, Group: spotKey}))
	c := f.cluster(t)
	c.Workflows = true

	r, err := c.Workload(context.Background(), Ref{Kind: "Job", Namespace: ns, Name: "nightly-1"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != "Job" || r.Source != "CronJob nightly metadata.annotations[apportion.dev/strategy]" || r.Mode != "preferred" ||
		r.Replicas != 3 || r.Pods.Live != 3 || r.Pods.Decided != 3 || r.Running != 3 || !r.WithinQuota {
		t.Errorf("a CronJob's Job: %+v", r)
	}
	job.Spec.Template.Annotations = map[string]string{annotations.Strategy: odSpot, annotations.Mode: "required"}
	r, err = f.cluster(t).Workload(context.Background(), Ref{Kind: "Job", Namespace: ns, Name: "nightly-1"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Source != "Job nightly-1 spec.template.metadata.annotations[apportion.dev/strategy]" || r.Mode != "required" {
		t.Errorf("the Job's pod template wins over its CronJob: %+v", r)
	}
	r, err = c.Workload(context.Background(), Ref{Kind: "Workflow", Namespace: ns, Name: "etl"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != "Workflow" || r.Source != "Workflow etl spec.podMetadata.annotations[apportion.dev/strategy]" || r.Replicas != 1 || r.Pods.Live != 1 {
		t.Errorf("a Workflow: %+v", r)
	}
	// status lists the running Job and the Workflow, not a finished Job.
	done := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "done", UID: "done-uid", Annotations: map[string]string{annotations.Strategy: odSpot}},
		Spec:   batchv1.JobSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "done-uid"}}},
		Status: batchv1.JobStatus{CompletionTime: ptr.To(metav1.Now())}}
	f.objs = append(f.objs, done)
	c = f.cluster(t)
	c.Workflows = true
	c.Reader = workflowMetadata{c.Reader, wf}
	rows, err := c.Status(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range rows {
		got = append(got, w.Kind+"/"+w.Name)
	}
	if want := "Job/nightly-1 Workflow/etl"; strings.Join(got, " ") != want {
		t.Errorf("status rows %v, want %s", got, want)
	}
	for _, arg := range []string{"job/nightly-1", "jobs.batch/nightly-1", "wf/etl", "workflow.argoproj.io/etl"} {
		if _, err := ParseRef([]string{arg}, ns); err != nil {
			t.Errorf("ParseRef(%q): %v", arg, err)
		}
	}
}

// workflowMetadata lists wf's metadata as the API server's metadata view
// does, which the fake client does not do for an unstructured kind.
type workflowMetadata struct {
	client.Reader
	wf *unstructured.Unstructured
}

func (r workflowMetadata) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if l, ok := list.(*metav1.PartialObjectMetadataList); ok && l.GroupVersionKind().Kind == "WorkflowList" {
		m := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: r.wf.GetNamespace(), Name: r.wf.GetName(), UID: r.wf.GetUID(), Labels: r.wf.GetLabels()}}
		m.SetGroupVersionKind(workload.WorkflowGVK)
		l.Items = []metav1.PartialObjectMetadata{m}
		return nil
	}
	return r.Reader.List(ctx, list, opts...)
}

// TestCronJobPolicy: a CronJob's Job that has no strategy of its own, and
// no policy of its own, takes the policy targeting its CronJob (target.kind
// CronJob, or a cluster policy whose kinds name CronJob); explain of the
// Job and of its pod names that policy and says it is the CronJob's.
func TestCronJobPolicy(t *testing.T) {
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly", UID: "cron-uid"}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "job-uid"}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly-1", UID: "job-uid",
		OwnerReferences: test.OwnedBy("batch/v1", "CronJob", "nightly", "cron-uid")}, Spec: batchv1.JobSpec{Selector: sel}}
	pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly-1-0", UID: "job-pod",
		Labels: sel.MatchLabels, OwnerReferences: test.OwnedBy("batch/v1", "Job", "nightly-1", "job-uid")}, NodeName: "od-1", Phase: corev1.PodRunning, Group: odKey})
	spec := policySpec(t, odSpot)
	spec.Target = v1alpha1.Target{APIVersion: "batch/v1", Kind: "CronJob", Name: "nightly"}
	cp := &v1alpha1.ClusterPlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "batch"},
		Spec: v1alpha1.ClusterPlacementPolicySpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
			Target: v1alpha1.ClusterTarget{Kinds: []string{"CronJob"}}, Strategy: v1alpha1.Strategy{Text: odSpot}, Priority: 3}}
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "web"}}}
	for _, tc := range []struct {
		name   string
		objs   []client.Object
		source string
	}{
		{name: "PlacementPolicy of the CronJob", objs: []client.Object{test.PlacementPolicy(metav1.ObjectMeta{Namespace: ns, Name: "nightly"}, spec)}, source: "PlacementPolicy shop/nightly"},
		{name: "ClusterPlacementPolicy of CronJobs", objs: []client.Object{namespace, cp}, source: "ClusterPlacementPolicy batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(nil, false)
			f.objs = append(append(f.objs, cron, job, pod), tc.objs...)
			c := f.cluster(t)
			c.ClusterPolicies = true
			r, err := c.Workload(context.Background(), Ref{Kind: "Job", Namespace: ns, Name: "nightly-1"})
			if err != nil {
				t.Fatal(err)
			}
			if r.Source != tc.source || r.Strategy == "" || r.NotPlaced != "" || !strings.Contains(r.Why, "CronJob nightly") {
				t.Errorf("job/nightly-1: source %q why %q problem %q, want %s, the CronJob's", r.Source, r.Why, r.NotPlaced, tc.source)
			}
			pr, err := c.Pod(context.Background(), ns, "nightly-1-0")
			if err != nil {
				t.Fatal(err)
			}
			if pr.Workload == nil || pr.Workload.Kind != "Job" || pr.Workload.Source != tc.source {
				t.Errorf("pod/nightly-1-0: workload %+v, want the Job placed by %s", pr.Workload, tc.source)
			}
		})
	}
}

// TestWorkflowOwners: what Argo records above a Workflow shows in explain:
// a WorkflowTemplate's spec.podMetadata (which Argo gives the pods of a
// Workflow that references it) is the strategy's source when the Workflow
// has none of its own; a strategy Argo copied from a CronWorkflow's
// spec.workflowMetadata names the CronWorkflow; one written in the
// CronWorkflow's own annotations, which Argo does not copy, is pointed out.
func TestWorkflowOwners(t *testing.T) {
	argo := func(kind, name string, fields map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: fields}
		u.SetGroupVersionKind(workload.WorkflowGVK.GroupVersion().WithKind(kind))
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetUID(types.UID(kind + "-" + name))
		return u
	}
	strategyOf := map[string]any{annotations.Strategy: odSpot}
	tmpl := argo("WorkflowTemplate", "train", map[string]any{"spec": map[string]any{"podMetadata": map[string]any{"annotations": strategyOf}}})
	fromTemplate := argo("Workflow", "train-abc", map[string]any{"spec": map[string]any{"workflowTemplateRef": map[string]any{"name": "train"}}})
	copied := argo("CronWorkflow", "nightly", map[string]any{"spec": map[string]any{"workflowMetadata": map[string]any{"annotations": strategyOf}}})
	fromCron := argo("Workflow", "nightly-1", nil)
	fromCron.SetLabels(map[string]string{CronWorkflowLabel: "nightly"})
	fromCron.SetAnnotations(map[string]string{annotations.Strategy: odSpot})
	own := argo("CronWorkflow", "hourly", nil)
	own.SetAnnotations(map[string]string{annotations.Strategy: odSpot})
	notCopied := argo("Workflow", "hourly-1", nil)
	notCopied.SetLabels(map[string]string{CronWorkflowLabel: "hourly"})

	f := newFixture(nil, false)
	f.objs = append(f.objs, tmpl, fromTemplate, copied, fromCron, own, notCopied)
	c := f.cluster(t)
	c.Workflows = true
	for _, tc := range []struct {
		name, source, why, problem string
	}{
		{name: "train-abc", source: "WorkflowTemplate train spec.podMetadata.annotations[apportion.dev/strategy]"},
		{name: "nightly-1", source: "Workflow nightly-1 metadata.annotations[apportion.dev/strategy]", why: "from CronWorkflow nightly spec.workflowMetadata.annotations"},
		{name: "hourly-1", why: "CronWorkflow hourly has the strategy in its own metadata.annotations", problem: "no strategy"},
	} {
		r, err := c.Workload(context.Background(), Ref{Kind: "Workflow", Namespace: ns, Name: tc.name})
		if err != nil {
			t.Fatal(err)
		}
		if r.Source != tc.source || !strings.Contains(r.Why, tc.why) || !strings.HasPrefix(r.NotPlaced, tc.problem) {
			t.Errorf("workflow/%s: source %q why %q problem %q; want %q, why with %q, problem %q", tc.name, r.Source, r.Why, r.NotPlaced, tc.source, tc.why, tc.problem)
		}
	}
}

// beyondCapsMark is what the placement controller writes on a pod it
// releases beyond caps (unsigned here: explain reads without the key).
func beyondCapsMark() map[string]string {
	rec, _ := json.Marshal(decision.Record{Counts: []int64{2, 3}, Reason: "beyond_caps"})
	return map[string]string{annotations.BeyondCaps: "true", annotations.Decision: string(rec)}
}

// TestWorkloadBeyondCapsAreNotStrays: at 7 replicas of 2 on-demand (max 2)
// and 3 spot (max 3), the 2 pods released beyond caps run on a spot node.
// They are beyond caps, not spot strays: spot runs its 3 and the next pods
// are beyond caps; once a spot pod is gone (its replacement waiting), the
// next pod goes to spot, as the placement controller places it, and the
// split is off until it runs.
func TestWorkloadBeyondCapsAreNotStrays(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odKey + ",weight=1,max=2:" + spotKey + ",weight=1,max=3"}, false)
	f.deploy.Spec.Replicas = ptr.To(int32(7))
	for range 2 {
		f.pod(f.cur, "od-1", odKey, nil)
	}
	spot := make([]*corev1.Pod, 3)
	for i := range spot {
		spot[i] = f.pod(f.cur, "spot-1", spotKey, nil)
	}
	for range 2 {
		f.pod(f.cur, "spot-1", "", beyondCapsMark())
	}
	web := Ref{Kind: "Deployment", Namespace: ns, Name: "web"}
	r, err := f.cluster(t).Workload(context.Background(), web)
	if err != nil {
		t.Fatal(err)
	}
	if r.Groups[1].Strays != 0 || r.Pods.Strays != 0 || r.Groups[1].Decided != 3 {
		t.Errorf("spot: %d decided, %d strays (%d in all); want 3 and none: %+v", r.Groups[1].Decided, r.Groups[1].Strays, r.Pods.Strays, r.Groups[1])
	}
	if r.Running != 7 || r.Groups[0].Actual != 2 || r.Groups[1].Actual != 3 || !r.WithinQuota || len(r.Drift) != 0 {
		t.Errorf("7 running, 2 on-demand and 3 spot, within quota: %+v", r)
	}
	if r.Next[0] != NextBeyondCaps {
		t.Errorf("next: %v, want beyond caps", r.Next)
	}

	// A spot pod deleted: its replacement waits for its decision.
	f.objs = slices.DeleteFunc(f.objs, func(o client.Object) bool { return o == spot[0] })
	f.pod(f.cur, "", "", nil).Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
	r, err = f.cluster(t).Workload(context.Background(), web)
	if err != nil {
		t.Fatal(err)
	}
	if r.Next[0] != spotKey || r.Groups[1].Strays != 0 {
		t.Errorf("a spot pod gone: next %v, spot strays %d; want spot next, no stray", r.Next, r.Groups[1].Strays)
	}
	if r.WithinQuota || r.Groups[1].Actual != 2 {
		t.Errorf("a spot pod gone: spot runs %d, within quota %v; want 2, off quota until its replacement runs: %+v", r.Groups[1].Actual, r.WithinQuota, r)
	}
}

// TestPodReportBeyondCaps: a pod released beyond caps says so, with its
// record, and is not called a stray.
func TestPodReportBeyondCaps(t *testing.T) {
	f := newFixture(map[string]string{annotations.Strategy: odKey + ",weight=1,max=2:" + spotKey + ",weight=1,max=3"}, false)
	p := f.pod(f.cur, "spot-1", "", beyondCapsMark())
	r, err := f.cluster(t).Pod(context.Background(), ns, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != StateBeyondCaps || strings.Contains(r.Why, "stray") || r.Decision == nil || r.Decision.Reason != "beyond_caps" || len(r.Decision.Seen) != 2 {
		t.Fatalf("a pod beyond caps: %+v, decision %+v", r, r.Decision)
	}
}
