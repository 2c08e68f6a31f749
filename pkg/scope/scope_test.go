package scope

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

const strategyText = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// newMarker is a Marker over a fake API holding objs; patches counts the
// patches it sends.
func newMarker(t *testing.T, objs ...client.Object) (*Marker, client.Client, *int) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	patches := new(int)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			*patches++
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	return &Marker{Reader: c, Writer: c, Excluded: sets.New("kube-system", "apportion-system")}, c, patches
}

func labelled(t *testing.T, c client.Client, name string) map[string]string {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Labels
}

// Mark labels a namespace once, and never an excluded or ignored one.
func TestMark(t *testing.T) {
	m, c, patches := newMarker(t,
		namespace("team", map[string]string{"owner": "a"}),
		namespace("done", map[string]string{annotations.NamespacePlacement: annotations.NamespacePlacementEnabled}),
		namespace("ignored", map[string]string{annotations.Ignore: ""}),
		namespace("kube-system", nil),
	)
	ctx := context.Background()
	for _, ns := range []string{"team", "team", "done", "ignored", "kube-system"} {
		if err := m.Mark(ctx, ns); err != nil {
			t.Fatalf("Mark(%s): %v", ns, err)
		}
	}
	if got := labelled(t, c, "team"); got[annotations.NamespacePlacement] != annotations.NamespacePlacementEnabled || got["owner"] != "a" {
		t.Errorf("namespace team has labels %v, want %s=%s added to its own", got, annotations.NamespacePlacement, annotations.NamespacePlacementEnabled)
	}
	for _, ns := range []string{"ignored", "kube-system"} {
		if _, ok := labelled(t, c, ns)[annotations.NamespacePlacement]; ok {
			t.Errorf("namespace %s labelled, want it left alone", ns)
		}
	}
	// team once (the second Mark reads the label), done never.
	if *patches != 1 {
		t.Errorf("%d patches, want 1", *patches)
	}
	if err := m.Mark(ctx, "gone"); err == nil {
		t.Error("Mark of a namespace that does not exist: no error")
	}
	var nilMarker *Marker
	if err := nilMarker.Mark(ctx, "team"); err != nil {
		t.Errorf("a nil Marker (webhook.scope: all): %v", err)
	}
}

// Sweep labels the namespaces whose workloads opt in by their own
// annotations or hold a PlacementPolicy; a strategy on a pod template alone
// is carried by the pods, and is not in the metadata caches anyway.
func TestSweep(t *testing.T) {
	deploy := func(ns, name string, meta, template map[string]string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: meta}}
		d.Spec.Template.Annotations = template
		return d
	}
	m, c, _ := newMarker(t,
		namespace("strategy", nil), namespace("legacy", nil), namespace("template", nil), namespace("arch", nil),
		namespace("policy", nil), namespace("plain", nil), namespace("kube-system", nil),
		deploy("strategy", "web", map[string]string{annotations.Strategy: strategyText}, nil),
		deploy("legacy", "web", map[string]string{annotations.LegacyStrategy: strategyText}, nil),
		deploy("template", "web", nil, map[string]string{annotations.Strategy: strategyText}),
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "arch", Name: "db", Annotations: map[string]string{annotations.Architectures: "Auto"}}},
		&v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "policy", Name: "p"}},
		deploy("plain", "web", map[string]string{annotations.Mode: annotations.ModeShadow}, nil),
		deploy("kube-system", "dns", map[string]string{annotations.Strategy: strategyText}, nil),
	)
	if err := m.Sweep(context.Background(), c, []schema.GroupVersionKind{workload.DeploymentGVK, workload.StatefulSetGVK}, true, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"strategy": true, "legacy": true, "template": false, "arch": true, "policy": true, "plain": false, "kube-system": false}
	for ns, w := range want {
		if got := labelled(t, c, ns)[annotations.NamespacePlacement] == annotations.NamespacePlacementEnabled; got != w {
			t.Errorf("namespace %s labelled: %v, want %v", ns, got, w)
		}
	}
}

// A namespace that cannot be labelled does not stop the others; the first
// error is returned.
func TestSweepReportsErrors(t *testing.T) {
	m, c, _ := newMarker(t,
		namespace("a", nil),
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web", Annotations: map[string]string{annotations.Strategy: strategyText}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "missing", Name: "web", Annotations: map[string]string{annotations.Strategy: strategyText}}},
	)
	err := m.Sweep(context.Background(), c, []schema.GroupVersionKind{workload.DeploymentGVK}, false, nil)
	if err == nil {
		t.Fatal("no error for a namespace that cannot be labelled")
	}
	if labelled(t, c, "a")[annotations.NamespacePlacement] != annotations.NamespacePlacementEnabled {
		t.Error("namespace a left unlabelled after an error on another")
	}
}

func TestOptedIn(t *testing.T) {
	for _, tc := range []struct {
		annots map[string]string
		want   bool
	}{
		{nil, false},
		{map[string]string{annotations.Strategy: strategyText}, true},
		{map[string]string{annotations.LegacyCamelStrategy: strategyText}, true},
		{map[string]string{annotations.LegacyCamelStrategy: strategyText, annotations.LegacyEnabled: "false"}, false},
		{map[string]string{annotations.Strategy: "not a strategy"}, true},
		{map[string]string{annotations.Architectures: " auto "}, true},
		{map[string]string{annotations.Architectures: "amd64"}, false},
		{map[string]string{annotations.Mode: annotations.ModeShadow, annotations.Skip: "true"}, false},
	} {
		if got := OptedIn(tc.annots); got != tc.want {
			t.Errorf("OptedIn(%v) = %v, want %v", tc.annots, got, tc.want)
		}
	}
}

// A ClusterPlacementPolicy's namespaces are labelled by MarkCovered (its
// admission) and by the sweep; never an excluded, system or unselected one.
func TestMarkCovered(t *testing.T) {
	cp := &v1alpha1.ClusterPlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "platform", UID: "c1", Generation: 1},
		Spec: v1alpha1.ClusterPlacementPolicySpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
			Strategy: v1alpha1.Strategy{Text: strategyText}}}
	web := map[string]string{"team": "web"}
	objs := func() []client.Object {
		return []client.Object{namespace("a", web), namespace("b", web), namespace("other", map[string]string{"team": "db"}),
			namespace("kube-public", web), namespace("apportion-system", web), cp.DeepCopy()}
	}
	want := map[string]bool{"a": true, "b": true, "other": false, "kube-public": false, "apportion-system": false}
	check := func(t *testing.T, c client.Client) {
		t.Helper()
		for ns, w := range want {
			if got := labelled(t, c, ns)[annotations.NamespacePlacement] == annotations.NamespacePlacementEnabled; got != w {
				t.Errorf("namespace %s labelled: %v, want %v", ns, got, w)
			}
		}
	}
	t.Run("admission", func(t *testing.T) {
		m, c, _ := newMarker(t, objs()...)
		src := policy.NewSource(c).WithClusterPolicies([]string{"apportion-system"})
		if err := m.MarkCovered(context.Background(), src, cp); err != nil {
			t.Fatal(err)
		}
		check(t, c)
	})
	t.Run("sweep", func(t *testing.T) {
		m, c, _ := newMarker(t, objs()...)
		src := policy.NewSource(c).WithClusterPolicies([]string{"apportion-system"})
		if err := m.Sweep(context.Background(), c, nil, true, src); err != nil {
			t.Fatal(err)
		}
		check(t, c)
	})
}

// A namespace relabelled into a cluster policy's selector is labelled by
// the leader's watch at once; one the policy does not cover, an ignored or
// excluded one, or one gone, is not, and one labelled already costs no
// patch.
func TestCovering(t *testing.T) {
	cp := &v1alpha1.ClusterPlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "platform", UID: "c1", Generation: 1},
		Spec: v1alpha1.ClusterPlacementPolicySpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
			Strategy: v1alpha1.Strategy{Text: strategyText}}}
	web := map[string]string{"team": "web"}
	m, c, patches := newMarker(t,
		namespace("moved", map[string]string{"team": "db"}), namespace("other", map[string]string{"team": "db"}),
		namespace("ignored", map[string]string{"team": "web", annotations.Ignore: ""}), namespace("apportion-system", web),
		namespace("done", map[string]string{"team": "web", annotations.NamespacePlacement: annotations.NamespacePlacementEnabled}), cp)
	src := policy.NewSource(c).WithClusterPolicies([]string{"apportion-system"})
	r := m.Covering(src)
	ctx := context.Background()
	reconcileAll := func() {
		t.Helper()
		for _, ns := range []string{"moved", "other", "ignored", "apportion-system", "done", "gone"} {
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: ns}}); err != nil {
				t.Fatalf("Reconcile(%s): %v", ns, err)
			}
		}
	}
	reconcileAll()
	if *patches != 0 {
		t.Fatalf("%d patches before any namespace is covered, want 0", *patches)
	}
	// The team moves: its namespace now matches the policy.
	moved := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: "moved"}, moved); err != nil {
		t.Fatal(err)
	}
	old := moved.DeepCopy()
	moved.Labels = web
	if err := c.Update(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if !CoveringPredicate().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: moved}) {
		t.Error("the relabel is not passed to the watch")
	}
	*patches = 0
	reconcileAll()
	want := map[string]bool{"moved": true, "other": false, "ignored": false, "apportion-system": false, "done": true}
	for ns, w := range want {
		if got := labelled(t, c, ns)[annotations.NamespacePlacement] == annotations.NamespacePlacementEnabled; got != w {
			t.Errorf("namespace %s labelled: %v, want %v", ns, got, w)
		}
	}
	if *patches != 1 {
		t.Errorf("%d patches, want 1 (namespace moved)", *patches)
	}
	// Once labelled, its events are passed over.
	labelledNow := moved.DeepCopy()
	labelledNow.Labels = map[string]string{"team": "web", "x": "y", annotations.NamespacePlacement: annotations.NamespacePlacementEnabled}
	if CoveringPredicate().Update(event.UpdateEvent{ObjectOld: moved, ObjectNew: labelledNow}) || CoveringPredicate().Create(event.CreateEvent{Object: labelledNow}) {
		t.Error("events of a labelled namespace passed to the watch")
	}
	if !CoveringPredicate().Create(event.CreateEvent{Object: namespace("new", web)}) {
		t.Error("a namespace created is not passed to the watch")
	}
}

// A Namespace and a ClusterPlacementPolicy created in one apply: the
// namespace's event is handled while the policy is not cached yet, when
// nothing covers it; the policy's event, once it is cached, queues the
// namespace again, and it is labelled without waiting for the sweep. Only
// the namespaces left to label are queued; a change of status or a policy
// being deleted queues none.
func TestCoveredPolicyCachedAfterNamespace(t *testing.T) {
	web := map[string]string{"team": "web"}
	m, c, patches := newMarker(t,
		namespace("shop", web), namespace("other", map[string]string{"team": "db"}),
		namespace("done", map[string]string{"team": "web", annotations.NamespacePlacement: annotations.NamespacePlacementEnabled}),
		namespace("ignored", map[string]string{"team": "web", annotations.Ignore: ""}), namespace("apportion-system", web))
	src := policy.NewSource(c).WithClusterPolicies([]string{"apportion-system"})
	r := m.Covering(src)
	ctx := context.Background()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	// drain reconciles what the handler queued, as the controller's
	// workers would, and returns the names.
	drain := func() []string {
		t.Helper()
		var names []string
		for q.Len() > 0 {
			req, _ := q.Get()
			q.Done(req)
			names = append(names, req.Name)
			if _, err := r.Reconcile(ctx, req); err != nil {
				t.Fatalf("Reconcile(%s): %v", req.Name, err)
			}
		}
		slices.Sort(names)
		return names
	}

	// The namespace's event first: no policy is cached yet.
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := labelled(t, c, "shop")[annotations.NamespacePlacement]; ok || *patches != 0 {
		t.Fatalf("namespace shop labelled before any policy covers it (%d patches)", *patches)
	}
	// Then the policy reaches the cache, and its event is handled.
	cp := &v1alpha1.ClusterPlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "platform", Generation: 1},
		Spec: v1alpha1.ClusterPlacementPolicySpec{NamespaceSelector: metav1.LabelSelector{MatchLabels: web},
			Strategy: v1alpha1.Strategy{Text: strategyText}}}
	if err := c.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	h := m.Covered(src)
	h.Create(ctx, event.CreateEvent{Object: cp}, q)
	if got := drain(); !slices.Equal(got, []string{"shop"}) {
		t.Errorf("the policy's event queued %v, want [shop]: the namespaces it covers that are left to label", got)
	}
	if labelled(t, c, "shop")[annotations.NamespacePlacement] != annotations.NamespacePlacementEnabled {
		t.Fatal("namespace shop left unlabelled after its cluster policy reached the cache: its pods miss the scoped webhook until the sweep")
	}
	if *patches != 1 {
		t.Errorf("%d patches, want 1 (shop)", *patches)
	}

	// The same policy again (a resync, its status written): nothing queued.
	status := cp.DeepCopy()
	status.Status.ObservedGeneration = 1
	h.Update(ctx, event.UpdateEvent{ObjectOld: cp, ObjectNew: status}, q)
	h.Create(ctx, event.CreateEvent{Object: cp}, q)
	if got := drain(); len(got) != 0 {
		t.Errorf("a status change or a labelled namespace queued %v, want nothing", got)
	}
	// Its selector widened: the namespace it now covers is labelled.
	wider := cp.DeepCopy()
	wider.Generation = 2
	wider.Spec.NamespaceSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "db"}}}}
	if err := c.Update(ctx, wider); err != nil {
		t.Fatal(err)
	}
	h.Update(ctx, event.UpdateEvent{ObjectOld: cp, ObjectNew: wider}, q)
	if got := drain(); !slices.Equal(got, []string{"other"}) {
		t.Errorf("the widened selector queued %v, want [other]", got)
	}
	for ns, w := range map[string]bool{"shop": true, "other": true, "done": true, "ignored": false, "apportion-system": false} {
		if got := labelled(t, c, ns)[annotations.NamespacePlacement] == annotations.NamespacePlacementEnabled; got != w {
			t.Errorf("namespace %s labelled: %v, want %v", ns, got, w)
		}
	}
	// A policy being deleted covers nothing any more.
	gone := wider.DeepCopy()
	gone.DeletionTimestamp = &metav1.Time{}
	gone.Spec.NamespaceSelector = metav1.LabelSelector{}
	if err := c.Create(ctx, namespace("new", nil)); err != nil {
		t.Fatal(err)
	}
	h.Create(ctx, event.CreateEvent{Object: gone}, q)
	if got := drain(); len(got) != 0 {
		t.Errorf("a policy being deleted queued %v, want nothing", got)
	}
}
