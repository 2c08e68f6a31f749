package policy

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// cpol is a cluster policy over the namespaces labelled team=web, created
// age minutes before epoch, whose strategy is the one group a=<name>.
func cpol(name string, age int, priority int32) *v1alpha1.ClusterPlacementPolicy {
	return &v1alpha1.ClusterPlacementPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("c-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(epoch.Add(-time.Duration(age) * time.Minute))},
		Spec: v1alpha1.ClusterPlacementPolicySpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
			Strategy:          v1alpha1.Strategy{Text: "a=" + name + ",weight=1"},
			Priority:          priority,
		},
	}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

var teamWeb = map[string]string{"team": "web"}

// resolveIn resolves the pod of a Deployment "web" (its annotations and
// labels as given, its template's annotations those of the pod) in
// namespace ns, with objs in the cache.
func resolveIn(t *testing.T, ns string, deployment, template map[string]string, labels map[string]string, objs ...client.Object) (*workload.Info, error) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, appsv1.AddToScheme, corev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs = append(objs,
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "d1", Annotations: deployment, Labels: labels}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-abc", UID: "rs1",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d1", Controller: ptr.To(true)}}}})
	c := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&v1alpha1.PlacementPolicy{}, IndexTarget, TargetIndex).WithObjects(objs...).Build()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{workload.PodTemplateHashLabel: "abc"}, Annotations: template,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs1", Controller: ptr.To(true)}}}}
	src := NewSource(c).WithClusterPolicies([]string{"apportion-system"})
	return workload.Resolve(context.Background(), c, ns, pod, workload.WithPolicies(src))
}

// TestClusterPrecedence: the workload's annotation, then a PlacementPolicy
// of its namespace, then the highest-ranked cluster policy covering it;
// equal priorities go to the oldest, then the first name.
func TestClusterPrecedence(t *testing.T) {
	withMode := func(p *v1alpha1.ClusterPlacementPolicy, m v1alpha1.Mode) *v1alpha1.ClusterPlacementPolicy {
		p.Spec.Mode = m
		return p
	}
	nsPolicy := pol("own", 1, ref(), &v1alpha1.Strategy{Text: "b=own,weight=1"})
	for _, tc := range []struct {
		name       string
		annotation map[string]string
		objs       []client.Object
		want       string // strategy source
		wantRaw    string
		mode       string
	}{
		{name: "cluster policy", objs: []client.Object{namespace("web", teamWeb), withMode(cpol("c1", 5, 0), v1alpha1.ModeShadow)},
			want: "ClusterPlacementPolicy c1", wantRaw: "a=c1,weight=1", mode: "shadow"},
		{name: "namespaced policy wins", objs: []client.Object{namespace("web", teamWeb), cpol("c1", 5, 100), nsPolicy},
			want: "PlacementPolicy web/own", wantRaw: "b=own,weight=1", mode: "required"},
		{name: "annotation wins", annotation: map[string]string{annotations.Strategy: "x=y,weight=1"}, objs: []client.Object{namespace("web", teamWeb), cpol("c1", 5, 100), nsPolicy},
			want: "metadata.annotations[apportion.dev/strategy]", wantRaw: "x=y,weight=1", mode: "required"},
		{name: "highest priority wins over older", objs: []client.Object{namespace("web", teamWeb), cpol("old", 50, 1), cpol("new", 1, 2)},
			want: "ClusterPlacementPolicy new", wantRaw: "a=new,weight=1", mode: "required"},
		{name: "tie: the oldest", objs: []client.Object{namespace("web", teamWeb), cpol("a-new", 1, 3), cpol("z-old", 50, 3)},
			want: "ClusterPlacementPolicy z-old", wantRaw: "a=z-old,weight=1", mode: "required"},
		{name: "tie of age: the first name", objs: []client.Object{namespace("web", teamWeb), cpol("b", 5, 3), cpol("a", 5, 3)},
			want: "ClusterPlacementPolicy a", wantRaw: "a=a,weight=1", mode: "required"},
		{name: "namespace not selected", objs: []client.Object{namespace("web", map[string]string{"team": "api"}), cpol("c1", 5, 0)}},
		{name: "ignored namespace", objs: []client.Object{namespace("web", map[string]string{"team": "web", annotations.Ignore: ""}), cpol("c1", 5, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := resolveIn(t, "web", tc.annotation, nil, nil, tc.objs...)
			if err != nil || info == nil {
				t.Fatalf("Resolve = %+v, %v", info, err)
			}
			if tc.want == "" {
				if info.Found {
					t.Fatalf("found %q from %s, want none", info.Strategy, info.Source)
				}
				return
			}
			if !info.Found || info.Source.String() != tc.want || info.Strategy != tc.wantRaw || info.Mode != tc.mode {
				t.Errorf("strategy %q from %s mode %q, want %q from %s mode %q", info.Strategy, info.Source, info.Mode, tc.wantRaw, tc.want, tc.mode)
			}
		})
	}
}

// TestClusterNeverCoversSystemNamespaces: excluded and system namespaces are
// never covered, even by a policy selecting every namespace.
func TestClusterNeverCoversSystemNamespaces(t *testing.T) {
	every := cpol("every", 5, 0)
	every.Spec.NamespaceSelector = metav1.LabelSelector{}
	for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease", "apportion-system", "web"} {
		info, err := resolveIn(t, ns, nil, nil, nil, namespace(ns, nil), every)
		if err != nil {
			t.Fatal(err)
		}
		if covered := info.Found; covered != (ns == "web") {
			t.Errorf("namespace %s covered %v (%s)", ns, covered, info.Source)
		}
	}
}

// TestClusterTarget: kinds and the workload selector narrow what a policy
// covers.
func TestClusterTarget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target v1alpha1.ClusterTarget
		labels map[string]string
		want   bool
	}{
		{name: "every workload", want: true},
		{name: "kind", target: v1alpha1.ClusterTarget{Kinds: []string{"Deployment"}}, want: true},
		{name: "other kind", target: v1alpha1.ClusterTarget{Kinds: []string{"StatefulSet"}}},
		{name: "selector", target: v1alpha1.ClusterTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}}, labels: map[string]string{"tier": "web"}, want: true},
		{name: "selector does not match", target: v1alpha1.ClusterTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}}, labels: map[string]string{"tier": "db"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := cpol("c", 5, 0)
			p.Spec.Target = tc.target
			info, err := resolveIn(t, "web", nil, nil, tc.labels, namespace("web", teamWeb), p)
			if err != nil {
				t.Fatal(err)
			}
			if info.Found != tc.want {
				t.Errorf("covered %v, want %v", info.Found, tc.want)
			}
		})
	}
}

// TestClusterSkip: apportion.dev/skip opts a workload out of a cluster
// policy unless the policy says allowSkip: false; that never overrides the
// skip of a workload its own namespace places.
func TestClusterSkip(t *testing.T) {
	skip := map[string]string{annotations.Skip: "true"}
	noSkip := func() *v1alpha1.ClusterPlacementPolicy {
		p := cpol("strict", 5, 0)
		p.Spec.AllowSkip = ptr.To(false)
		return p
	}
	for _, tc := range []struct {
		name                string
		deployment, tmpl    map[string]string
		objs                []client.Object
		wantSkip, wantFound bool
	}{
		{name: "default: skip on the workload", deployment: skip, objs: []client.Object{cpol("c", 5, 0)}, wantSkip: true, wantFound: true},
		{name: "default: skip on the template", tmpl: skip, objs: []client.Object{cpol("c", 5, 0)}, wantSkip: true, wantFound: true},
		{name: "allowSkip true", deployment: skip, objs: []client.Object{func() *v1alpha1.ClusterPlacementPolicy {
			p := cpol("c", 5, 0)
			p.Spec.AllowSkip = ptr.To(true)
			return p
		}()}, wantSkip: true, wantFound: true},
		{name: "allowSkip false: workload", deployment: skip, objs: []client.Object{noSkip()}, wantFound: true},
		{name: "allowSkip false: template", tmpl: skip, objs: []client.Object{noSkip()}, wantFound: true},
		{name: "allowSkip false, namespaced policy places", deployment: skip, objs: []client.Object{noSkip(), pol("own", 1, ref(), &v1alpha1.Strategy{Text: "b=c,weight=1"})}, wantSkip: true, wantFound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := resolveIn(t, "web", tc.deployment, tc.tmpl, nil, append(tc.objs, namespace("web", teamWeb))...)
			if err != nil {
				t.Fatal(err)
			}
			if info.Skip != tc.wantSkip || info.Found != tc.wantFound {
				t.Errorf("skip %v found %v (%s), want skip %v found %v", info.Skip, info.Found, info.Source, tc.wantSkip, tc.wantFound)
			}
		})
	}
}

// TestClusterNamespaceNotCached: with cluster policies, a namespace the
// cache does not hold yet is not taken as unselected: the caller waits.
func TestClusterNamespaceNotCached(t *testing.T) {
	if _, err := resolveIn(t, "new", nil, nil, nil, cpol("c", 5, 0)); !errors.Is(err, workload.ErrNotCached) {
		t.Errorf("err = %v, want ErrNotCached", err)
	}
	// No cluster policy: nothing to wait for.
	if info, err := resolveIn(t, "new", nil, nil, nil); err != nil || info.Found {
		t.Errorf("without cluster policies: %+v, %v", info, err)
	}
}

// TestRankedAndTied: the order Covering gives, and when the winner is tied.
func TestRankedAndTied(t *testing.T) {
	a, b, c := cpol("a", 1, 5), cpol("b", 9, 5), cpol("c", 3, 7)
	ranked := []*v1alpha1.ClusterPlacementPolicy{a, b, c}
	slicesSort(ranked)
	if ranked[0] != c || ranked[1] != b || ranked[2] != a {
		t.Errorf("ranked %s %s %s, want c b a", ranked[0].Name, ranked[1].Name, ranked[2].Name)
	}
	if Tied(ranked) || !Tied(ranked[1:]) || Tied(ranked[2:]) {
		t.Errorf("Tied wrong: %v %v %v", Tied(ranked), Tied(ranked[1:]), Tied(ranked[2:]))
	}
}

func slicesSort(s []*v1alpha1.ClusterPlacementPolicy) { slices.SortFunc(s, Ranked) }
