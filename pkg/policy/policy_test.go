package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const (
	seed004 = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	ct      = "karpenter.sh/capacity-type"
	od      = ct + "=on-demand"
	spot    = ct + "=spot"
)

func seed004Groups() *v1alpha1.Strategy {
	return &v1alpha1.Strategy{Groups: []v1alpha1.Group{
		{Labels: map[string]string{ct: "on-demand"}, Base: 2, Weight: 1},
		{Labels: map[string]string{ct: "spot"}, Weight: 3},
	}}
}

func TestStrategyForms(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    v1alpha1.PlacementPolicySpec
		want    string
		wantErr string
	}{
		{name: "structured groups", spec: v1alpha1.PlacementPolicySpec{Strategy: seed004Groups()}, want: seed004},
		{name: "text, canonical", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Text: " karpenter.sh/capacity-type=on-demand, weight=1 ,base=2:karpenter.sh/capacity-type=spot,base=0,weight=3"}}, want: seed004},
		{name: "distribution (seed 001)", spec: v1alpha1.PlacementPolicySpec{Distribution: []v1alpha1.DistributionEntry{
			{NodeLabel: map[string]string{"type": "default"}, Weight: 80}, {NodeLabel: map[string]string{"type": "spot"}, Weight: 20}}},
			want: "type=default,weight=80:type=spot,weight=20"},
		{name: "labels of a group in key order", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: []v1alpha1.Group{
			{Labels: map[string]string{ct: "spot", "kubernetes.io/arch": "arm64"}, Weight: 1}}}},
			want: "karpenter.sh/capacity-type=spot,kubernetes.io/arch=arm64,weight=1"},
		{name: "structured groups with a cap", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: []v1alpha1.Group{
			{Labels: map[string]string{ct: "on-demand"}, Weight: 1, Max: ptr.To[int32](3)}, {Labels: map[string]string{ct: "spot"}, Weight: 1}}}},
			want: "karpenter.sh/capacity-type=on-demand,weight=1,max=3:karpenter.sh/capacity-type=spot,weight=1"},
		{name: "groups: a cap of 0", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: []v1alpha1.Group{
			{Labels: map[string]string{ct: "on-demand"}, Weight: 1, Max: ptr.To[int32](0)}, {Labels: map[string]string{ct: "spot"}, Weight: 1}}}},
			wantErr: "spec.strategy.groups[0]: max must be a positive integer, got 0"},
		{name: "groups: base past the cap", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: []v1alpha1.Group{
			{Labels: map[string]string{ct: "on-demand"}, Base: 4, Max: ptr.To[int32](3)}, {Labels: map[string]string{ct: "spot"}, Weight: 1}}}},
			want:    "karpenter.sh/capacity-type=on-demand,base=4,max=3:karpenter.sh/capacity-type=spot,weight=1",
			wantErr: "spec.strategy.groups[0]: invalid strategy: group 1: base 4 is more than max 3"},
		{name: "text: the parser's message", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Text: "a=b,weight=x"}},
			want: "a=b,weight=x", wantErr: `spec.strategy.text: invalid strategy: group 1, item 2 "weight=x": weight must be a non-negative integer, got "x"`},
		{name: "groups: the entry named", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: []v1alpha1.Group{
			{Labels: map[string]string{"a": "b"}, Weight: 1}, {Labels: map[string]string{"a": "b"}, Weight: 1}}}},
			want: "a=b,weight=1:a=b,weight=1", wantErr: "spec.strategy.groups[1]: invalid strategy: group 2: same node labels as group 1 (a=b)"},
		{name: "groups: no labels", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: []v1alpha1.Group{{Weight: 1}}}},
			wantErr: "spec.strategy.groups[0]: invalid strategy: group 1: group has no node label", want: "weight=1"},
		{name: "groups: every weight 0", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: []v1alpha1.Group{{Labels: map[string]string{"a": "b"}, Base: 1}}}},
			want: "a=b,base=1", wantErr: "spec.strategy.groups: invalid strategy: every group has weight 0"},
		{name: "distribution: separator in a key", spec: v1alpha1.PlacementPolicySpec{Distribution: []v1alpha1.DistributionEntry{{NodeLabel: map[string]string{"a,b": "c"}, Weight: 1}}},
			wantErr: `spec.distribution[0].nodeLabel["a,b"]: invalid node label key`},
		{name: "both forms", spec: v1alpha1.PlacementPolicySpec{Strategy: seed004Groups(), Distribution: []v1alpha1.DistributionEntry{{NodeLabel: map[string]string{"a": "b"}, Weight: 1}}},
			wantErr: "exactly one of strategy and distribution"},
		{name: "groups and text", spec: v1alpha1.PlacementPolicySpec{Strategy: &v1alpha1.Strategy{Groups: seed004Groups().Groups, Text: seed004}},
			wantErr: "spec.strategy: exactly one of groups and text"},
		{name: "none", spec: v1alpha1.PlacementPolicySpec{}, wantErr: "exactly one of strategy and distribution"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := Strategy(&tc.spec)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("error %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if raw != tc.want {
				t.Errorf("raw = %q, want %q", raw, tc.want)
			}
		})
	}
}

var epoch = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func pol(name string, age int, target v1alpha1.Target, s *v1alpha1.Strategy) *v1alpha1.PlacementPolicy {
	return &v1alpha1.PlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name), Generation: 1,
			CreationTimestamp: metav1.NewTime(epoch.Add(-time.Duration(age) * time.Minute))},
		Spec: v1alpha1.PlacementPolicySpec{Target: target, Strategy: s, Mode: v1alpha1.ModeRequired},
	}
}

// ref targets the Deployment web.
func ref() v1alpha1.Target { return v1alpha1.Target{Kind: "Deployment", Name: "web"} }

func top(gvk schema.GroupVersionKind, labels map[string]string) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "web", Labels: labels}}
	o.SetGroupVersionKind(gvk)
	return o
}

var (
	deployment  = workload.DeploymentGVK
	statefulSet = workload.StatefulSetGVK
	rollout     = workload.RolloutGVK
)

func newSource(t *testing.T, policies ...*v1alpha1.PlacementPolicy) *Source {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := make([]client.Object, len(policies))
	for i, p := range policies {
		objs[i] = p
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&v1alpha1.PlacementPolicy{}, IndexTarget, TargetIndex).Build()
	return NewSource(c)
}

func TestSourcePrecedence(t *testing.T) {
	text := func(s string) *v1alpha1.Strategy { return &v1alpha1.Strategy{Text: s} }
	app := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	for _, tc := range []struct {
		name      string
		policies  []*v1alpha1.PlacementPolicy
		top       *metav1.PartialObjectMetadata
		want      string // "namespace/name" of the winner, "" for none
		wantRaw   string
		preferred bool
	}{
		{name: "by reference, canonical strategy", top: top(deployment, nil),
			policies: []*v1alpha1.PlacementPolicy{pol("a", 1, ref(), seed004Groups())}, want: "web/a", wantRaw: seed004},
		{name: "another kind of the same name does not match", top: top(statefulSet, nil),
			policies: []*v1alpha1.PlacementPolicy{pol("a", 1, ref(), seed004Groups())}},
		{name: "apiVersion of another group does not match", top: top(deployment, nil),
			policies: []*v1alpha1.PlacementPolicy{pol("a", 1, v1alpha1.Target{APIVersion: "argoproj.io/v1alpha1", Kind: "Deployment", Name: "web"}, seed004Groups())}},
		{name: "Rollout by reference", top: top(rollout, nil),
			policies: []*v1alpha1.PlacementPolicy{pol("a", 1, v1alpha1.Target{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web"}, seed004Groups())}, want: "web/a", wantRaw: seed004},
		{name: "oldest wins", top: top(deployment, nil), policies: []*v1alpha1.PlacementPolicy{
			pol("new", 1, ref(), text("a=b,weight=1")),
			pol("old", 5, ref(), seed004Groups()),
		}, want: "web/old", wantRaw: seed004},
		{name: "same age: name decides", top: top(deployment, nil), policies: []*v1alpha1.PlacementPolicy{
			pol("b", 2, ref(), text("a=b,weight=1")),
			pol("a", 2, ref(), seed004Groups()),
		}, want: "web/a", wantRaw: seed004},
		{name: "selector matches the workload's labels", top: top(deployment, map[string]string{"app": "web"}),
			policies: []*v1alpha1.PlacementPolicy{pol("sel", 1, v1alpha1.Target{Selector: app}, text("a=b,weight=1"))}, want: "web/sel", wantRaw: "a=b,weight=1"},
		{name: "selector: other labels", top: top(deployment, map[string]string{"app": "api"}),
			policies: []*v1alpha1.PlacementPolicy{pol("sel", 1, v1alpha1.Target{Selector: app}, text("a=b,weight=1"))}},
		{name: "selector with a kind: other kinds do not match", top: top(statefulSet, map[string]string{"app": "web"}),
			policies: []*v1alpha1.PlacementPolicy{pol("sel", 1, v1alpha1.Target{Kind: "Deployment", Selector: app}, text("a=b,weight=1"))}},
		{name: "older selector wins over a newer reference", top: top(deployment, map[string]string{"app": "web"}), policies: []*v1alpha1.PlacementPolicy{
			pol("sel", 9, v1alpha1.Target{Selector: app}, text("a=b,weight=1")),
			pol("ref", 1, ref(), seed004Groups()),
		}, want: "web/sel", wantRaw: "a=b,weight=1"},
		{name: "preferred mode", top: top(deployment, nil), policies: []*v1alpha1.PlacementPolicy{
			func() *v1alpha1.PlacementPolicy {
				p := pol("a", 1, ref(), seed004Groups())
				p.Spec.Mode = v1alpha1.ModePreferred
				return p
			}()}, want: "web/a", wantRaw: seed004, preferred: true},
		{name: "invalid strategy: returned as written for placement to report", top: top(deployment, nil),
			policies: []*v1alpha1.PlacementPolicy{pol("a", 1, ref(), text("a=b,weight=x"))}, want: "web/a", wantRaw: "a=b,weight=x"},
		{name: "another namespace's policy does not apply", top: top(deployment, nil), policies: []*v1alpha1.PlacementPolicy{
			func() *v1alpha1.PlacementPolicy {
				p := pol("a", 1, ref(), seed004Groups())
				p.Namespace = "other"
				return p
			}()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSource(t, tc.policies...)
			got, ok, err := winner(s, tc.top)
			raw, mode, name := got.Strategy, got.Mode, got.Name
			if err != nil || ok != (tc.want != "") || name != tc.want {
				t.Fatalf("Policy = %q ok=%v, want %q", name, ok, tc.want)
			}
			if preferred := mode == string(v1alpha1.ModePreferred); raw != tc.wantRaw || preferred != tc.preferred {
				t.Errorf("raw %q mode %q, want %q preferred=%v", raw, mode, tc.wantRaw, tc.preferred)
			}
		})
	}
}

// TestResolveFallsBackToPolicy: through workload.Resolve, the policy places a
// workload without an annotation, and the annotation wins when present.
func TestResolveFallsBackToPolicy(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, appsv1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name        string
		annotation  map[string]string
		policyMode  v1alpha1.Mode
		defaultMode string
		want        string
		mode        string
	}{
		{name: "policy", policyMode: v1alpha1.ModePreferred, want: seed004, mode: "preferred"},
		{name: "policy's mode wins over the default", policyMode: v1alpha1.ModeShadow, defaultMode: "preferred", want: seed004, mode: "shadow"},
		{name: "policy without a mode: the default", defaultMode: "shadow", want: seed004, mode: "shadow"},
		{name: "workload's mode wins over the policy's", annotation: map[string]string{"apportion.dev/mode": "shadow"}, policyMode: v1alpha1.ModeRequired, want: seed004, mode: "shadow"},
		{name: "annotation wins", annotation: map[string]string{"apportion.dev/strategy": "a=b,weight=1"}, policyMode: v1alpha1.ModePreferred, want: "a=b,weight=1", mode: "required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pol("a", 1, ref(), seed004Groups())
			p.Spec.Mode = tc.policyMode
			c := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&v1alpha1.PlacementPolicy{}, IndexTarget, TargetIndex).WithObjects(p,
				&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "web", UID: "d1", Annotations: tc.annotation}},
				&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "web-abc", UID: "rs1",
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d1", Controller: ptr.To(true)}}}},
			).Build()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{workload.PodTemplateHashLabel: "abc"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs1", Controller: ptr.To(true)}}}}
			info, err := workload.Resolve(context.Background(), c, "web", pod, workload.WithPolicies(NewSource(c)), workload.WithDefaultMode(tc.defaultMode))
			if err != nil || info == nil || !info.Found {
				t.Fatalf("Resolve = %+v, %v", info, err)
			}
			if info.Strategy != tc.want || info.Mode != tc.mode {
				t.Errorf("strategy %q mode %q (from %s), want %q %q", info.Strategy, info.Mode, info.Source, tc.want, tc.mode)
			}
		})
	}
}

func TestNilSourceFindsNothing(t *testing.T) {
	var s *Source
	var src workload.PolicySource = s
	if ok, _ := src.Candidates(context.Background(), "web", top(deployment, nil)); len(ok) > 0 {
		t.Error("a nil Source found a policy")
	}
}

// winner is the first of Candidates in namespace web: the policy that
// places top when it has no strategy of its own; ok is false when none
// does.
func winner(s *Source, top *metav1.PartialObjectMetadata) (p workload.Policy, ok bool, err error) {
	ps, err := s.Candidates(context.Background(), "web", top)
	if err != nil || len(ps) == 0 {
		return workload.Policy{}, false, err
	}
	return ps[0], true, nil
}

func TestSourceCachesByGeneration(t *testing.T) {
	p := pol("a", 1, ref(), seed004Groups())
	s := newSource(t, p)
	if got, _, _ := winner(s, top(deployment, nil)); got.Strategy != seed004 {
		t.Fatalf("raw %q", got.Strategy)
	}
	// Same UID and generation: the parsed text is reused.
	s.parsed[p.UID] = parsedStrategy{generation: 1, raw: "cached"}
	if got, _, _ := winner(s, top(deployment, nil)); got.Strategy != "cached" {
		t.Errorf("same generation parsed again: %q", got.Strategy)
	}
	s.parsed[p.UID] = parsedStrategy{generation: 0, raw: "stale"}
	if got, _, _ := winner(s, top(deployment, nil)); got.Strategy != seed004 {
		t.Errorf("a new generation must be parsed again: %q", got.Strategy)
	}
}

func nodes(n int, labels map[string]string) []map[string]string {
	out := make([]map[string]string, n)
	for i := range out {
		out[i] = labels
	}
	return out
}

func cond(st v1alpha1.PlacementPolicyStatus, typ string) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func TestStatus(t *testing.T) {
	now := metav1.NewTime(epoch)
	odNode := map[string]string{ct: "on-demand", "kubernetes.io/arch": "amd64"}
	spotNode := map[string]string{ct: "spot", "kubernetes.io/arch": "arm64"}
	pools := []GroupPool{{NodePool: "on-demand-amd64"}, {NodePool: "spot-arm64"}}
	p := pol("a", 1, ref(), seed004Groups())

	t.Run("exact split", func(t *testing.T) {
		st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: 10, Winner: "a",
			NodeLabels: append(nodes(4, odNode), nodes(6, spotNode)...)}}, pools, now)
		want := []v1alpha1.GroupStatus{{Key: od, NodePool: "on-demand-amd64", Desired: 4, Actual: 4}, {Key: spot, NodePool: "spot-arm64", Desired: 6, Actual: 6}}
		if len(st.Groups) != 2 || st.Groups[0] != want[0] || st.Groups[1] != want[1] {
			t.Errorf("groups %+v, want %+v", st.Groups, want)
		}
		if !st.WithinQuota || st.Replicas != 10 || st.Target != "Deployment/web" || st.Strategy != seed004 || st.ObservedGeneration != 1 {
			t.Errorf("status %+v", st)
		}
		if c := cond(st, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonApplied {
			t.Errorf("Ready %+v", c)
		}
		if c := cond(st, v1alpha1.ConditionConflict); c.Status != metav1.ConditionFalse {
			t.Errorf("Conflict %+v", c)
		}
		if c := cond(st, v1alpha1.ConditionGroupUnavailable); c.Status != metav1.ConditionFalse {
			t.Errorf("GroupUnavailable %+v", c)
		}
	})
	t.Run("desired by the quota method at n, actual within quota while scaling", func(t *testing.T) {
		// 5 replicas: od 3 spot 2 (seed 004's sequence); 3 Running pods,
		// 2 on-demand 1 spot: within quota at 3 (shares 2, 1... base first).
		st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: 5, Winner: "a",
			NodeLabels: append(nodes(2, odNode), nodes(1, spotNode)...)}}, pools, now)
		if st.Groups[0].Desired != 3 || st.Groups[1].Desired != 2 || st.Groups[0].Actual != 2 || st.Groups[1].Actual != 1 {
			t.Errorf("groups %+v", st.Groups)
		}
		if !st.WithinQuota {
			t.Error("2/1 of 3 is within quota")
		}
	})
	t.Run("off quota", func(t *testing.T) {
		st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: 10, Winner: "a",
			NodeLabels: append(nodes(7, odNode), nodes(3, spotNode)...)}}, pools, now)
		if st.WithinQuota || *st.Workloads[0].WithinQuota {
			t.Errorf("7/3 of 10 is off quota: %+v", st)
		}
	})
	t.Run("a pod outside every group", func(t *testing.T) {
		st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: 3, Winner: "a",
			NodeLabels: append(nodes(2, odNode), map[string]string{"other": "x"})}}, pools, now)
		if st.WithinQuota || st.Unmatched != 1 {
			t.Errorf("unmatched %d within %v", st.Unmatched, st.WithinQuota)
		}
	})
	t.Run("group unavailable", func(t *testing.T) {
		st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: 4, Winner: "a", NodeLabels: nodes(4, odNode)}},
			[]GroupPool{{NodePool: "on-demand-amd64"}, {Err: errors.New("no NodePool can serve the group")}}, now)
		c := cond(st, v1alpha1.ConditionGroupUnavailable)
		if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonNoNodePool || !strings.Contains(c.Message, "group 2 ("+spot+"): no NodePool") {
			t.Errorf("GroupUnavailable %+v", c)
		}
		if st.Groups[1].Unavailable == "" || st.Groups[0].Desired != 4 || st.Groups[1].Desired != 0 || !st.WithinQuota {
			t.Errorf("the other groups share the part: %+v within %v", st.Groups, st.WithinQuota)
		}
		if c := cond(st, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
			t.Errorf("Ready %+v", c)
		}
	})
	t.Run("no group available", func(t *testing.T) {
		st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: 4, Winner: "a"}},
			[]GroupPool{{Err: errors.New("x")}, {Err: errors.New("y")}}, now)
		if c := cond(st, v1alpha1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonNoGroupAvailable {
			t.Errorf("Ready %+v", c)
		}
		if st.WithinQuota {
			t.Error("within quota without groups")
		}
	})
	t.Run("older policy wins", func(t *testing.T) {
		st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: 10, Winner: "older", NodeLabels: nodes(10, odNode)}}, pools, now)
		c := cond(st, v1alpha1.ConditionConflict)
		if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonOlderPolicyWins || !strings.Contains(c.Message, "older PlacementPolicy older") {
			t.Errorf("Conflict %+v", c)
		}
		if r := cond(st, v1alpha1.ConditionReady); r.Status != metav1.ConditionFalse || r.Reason != v1alpha1.ReasonConflict {
			t.Errorf("Ready %+v", r)
		}
		if st.Replicas != 0 || st.WithinQuota || st.Groups[0].Actual != 0 || st.Workloads[0].PlacedBy != "PlacementPolicy older" {
			t.Errorf("a policy that places nothing counts nothing: %+v", st)
		}
	})
	t.Run("annotation wins", func(t *testing.T) {
		st := Status(p, []Workload{{Kind: "Deployment", Name: "web", Replicas: 10, Winner: "a", Annotation: "metadata.annotations[apportion.dev/strategy]"}}, pools, now)
		c := cond(st, v1alpha1.ConditionConflict)
		if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonAnnotationWins || !strings.Contains(c.Message, "metadata.annotations[apportion.dev/strategy]") {
			t.Errorf("Conflict %+v", c)
		}
		if st.Workloads[0].PlacedBy != "Annotation" {
			t.Errorf("placed by %q", st.Workloads[0].PlacedBy)
		}
	})
	t.Run("selector: sums over the workloads it places", func(t *testing.T) {
		sp := pol("sel", 1, v1alpha1.Target{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}, seed004Groups())
		st := Status(sp, []Workload{
			{Kind: "Deployment", Name: "one", Replicas: 4, Winner: "sel", NodeLabels: append(nodes(2, odNode), nodes(2, spotNode)...)},
			{Kind: "StatefulSet", Name: "two", Replicas: 2, Winner: "sel", NodeLabels: nodes(2, odNode)},
			{Kind: "Deployment", Name: "three", Replicas: 9, Winner: "sel", Annotation: "x"},
		}, pools, now)
		if st.Replicas != 6 || st.Groups[0].Desired != 4 || st.Groups[1].Desired != 2 || st.Groups[0].Actual != 4 || st.Groups[1].Actual != 2 || !st.WithinQuota {
			t.Errorf("status %+v", st)
		}
		if st.Target != "team=a (3)" {
			t.Errorf("target %q", st.Target)
		}
		if c := cond(st, v1alpha1.ConditionConflict); c.Reason != v1alpha1.ReasonAnnotationWins {
			t.Errorf("Conflict %+v", c)
		}
	})
	t.Run("target not found", func(t *testing.T) {
		st := Status(p, nil, pools, now)
		if c := cond(st, v1alpha1.ConditionReady); c.Reason != v1alpha1.ReasonTargetNotFound {
			t.Errorf("Ready %+v", c)
		}
	})
	t.Run("invalid strategy", func(t *testing.T) {
		bad := pol("bad", 1, ref(), &v1alpha1.Strategy{Text: "a=b"})
		st := Status(bad, []Workload{{Kind: "Deployment", Name: "web", Replicas: 1, Winner: "bad"}}, nil, now)
		if c := cond(st, v1alpha1.ConditionReady); c.Reason != v1alpha1.ReasonInvalidStrategy || !strings.Contains(c.Message, "every group has weight 0") {
			t.Errorf("Ready %+v", c)
		}
	})
	t.Run("transition times kept when nothing changes", func(t *testing.T) {
		w := []Workload{{Kind: "Deployment", Name: "web", Replicas: 10, Winner: "a", NodeLabels: append(nodes(4, odNode), nodes(6, spotNode)...)}}
		prev := p.DeepCopy()
		prev.Status = Status(p, w, pools, now)
		later := metav1.NewTime(epoch.Add(time.Hour))
		st := Status(prev, w, pools, later)
		if c := cond(st, v1alpha1.ConditionReady); !c.LastTransitionTime.Equal(&now) {
			t.Errorf("Ready moved to %v", c.LastTransitionTime)
		}
	})
}

// TestOrNil: without a Source, readers get a nil interface, not one holding a
// nil *Source (which would read as "policies are served").
func TestOrNil(t *testing.T) {
	var none *Source
	if none.OrNil() != nil {
		t.Error("a nil Source gave a non-nil PolicySource")
	}
	if src := NewSource(nil); src.OrNil() == nil {
		t.Error("a Source gave a nil PolicySource")
	}
}
