package workload

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
	"github.com/apportion-dev/apportion/pkg/test"
)

const validStrategy = "a=b,weight=1:a=c,weight=1"

// guardedPolicies is a cluster policy that places every workload and may
// refuse apportion.dev/skip.
type guardedPolicies struct{ noSkip bool }

func (g guardedPolicies) Candidates(context.Context, string, *metav1.PartialObjectMetadata) ([]Policy, error) {
	return []Policy{{Strategy: validStrategy, Name: "platform", Cluster: true, NoSkip: g.noSkip}}, nil
}

func (g guardedPolicies) SkipMayBeRefused(context.Context) bool { return g.noSkip }

// failingReader fails every read with an error other than NotFound.
type failingReader struct{ client.Reader }

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("cache broken")
}

func TestClassify(t *testing.T) {
	cache := memcache.New(test.Scheme())
	if err := cache.Add(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "auto", Labels: map[string]string{annotations.Architectures: "auto"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "placed", UID: "d1", Annotations: map[string]string{annotations.Strategy: validStrategy, annotations.Rebalance: "yes"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "placed-1", UID: "rs1", OwnerReferences: owner("Deployment", "apps/v1", "placed", "d1")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "plain", UID: "d2"}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "plain-1", UID: "rs2", OwnerReferences: owner("Deployment", "apps/v1", "plain", "d2")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "auto", Name: "plain", UID: "d2"}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "auto", Name: "plain-1", UID: "rs2", OwnerReferences: owner("Deployment", "apps/v1", "plain", "d2")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "broken", UID: "d3", Annotations: map[string]string{annotations.Strategy: "a=b,weight=x"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "broken-1", UID: "rs3", OwnerReferences: owner("Deployment", "apps/v1", "broken", "d3")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "quiet", UID: "d4", Annotations: map[string]string{annotations.Strategy: validStrategy, annotations.Mode: "shadow"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "quiet-1", UID: "rs4", OwnerReferences: owner("Deployment", "apps/v1", "quiet", "d4")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "out", UID: "d5", Annotations: map[string]string{annotations.Skip: "true"}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "out-1", UID: "rs5", OwnerReferences: owner("Deployment", "apps/v1", "out", "d5")}},
	); err != nil {
		t.Fatal(err)
	}
	of := func(name string, uid types.UID, mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{PodTemplateHashLabel: "1"}, OwnerReferences: owner("ReplicaSet", "apps/v1", name, uid)}}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	ann := func(kv ...string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Annotations = map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				p.Annotations[kv[i]] = kv[i+1]
			}
		}
	}
	bare := func(p *corev1.Pod) { p.OwnerReferences = nil }
	uncached := func(p *corev1.Pod) { p.OwnerReferences = owner("ReplicaSet", "apps/v1", "new-1", "rs9") }
	// A ReplicaSet the cache has not seen yet, of a Deployment it has.
	newRevision := func(p *corev1.Pod) { p.Labels[PodTemplateHashLabel] = "2" }
	for _, tc := range []struct {
		name      string
		namespace string
		pod       *corev1.Pod
		reader    client.Reader
		opts      []Option
		verdict   Verdict
		skipped   SkipReason
		basis     Basis
		mode      string
		info      bool // resolved: Info set
		problems  bool
	}{
		{name: "mirror pod", pod: of("placed-1", "rs1", ann(corev1.MirrorPodAnnotationKey, "x")), skipped: SkipMirror},
		{name: "nodeName", pod: of("placed-1", "rs1", func(p *corev1.Pod) { p.Spec.NodeName = "n" }), skipped: SkipScheduled},
		{name: "DaemonSet pod", pod: of("placed-1", "rs1", func(p *corev1.Pod) { p.OwnerReferences[0].Kind = "DaemonSet" }), skipped: SkipDaemonSet},
		{name: "gated already", pod: of("placed-1", "rs1", func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "other"}, {Name: annotations.PlacementGate}}
		}), skipped: SkipGated},
		{name: "strategy: held", pod: of("placed-1", "rs1"), verdict: Hold, basis: BasisStrategy, mode: annotations.ModeRequired, info: true, problems: true},
		{name: "strategy, default preferred", pod: of("placed-1", "rs1"), opts: []Option{WithDefaultMode("Preferred")}, verdict: Hold, basis: BasisStrategy, mode: annotations.ModePreferred, info: true, problems: true},
		{name: "strategy in shadow mode", pod: of("quiet-1", "rs4"), verdict: Shadow, basis: BasisStrategy, mode: annotations.ModeShadow, info: true},
		{name: "invalid strategy", pod: of("broken-1", "rs3"), verdict: Invalid, info: true},
		{name: "workload opted out", pod: of("out-1", "rs5"), skipped: SkipOptedOut, info: true},
		{name: "opt-out refused by a cluster policy", pod: of("out-1", "rs5"), opts: []Option{WithPolicies(guardedPolicies{noSkip: true})}, verdict: Hold, basis: BasisStrategy, mode: annotations.ModeRequired, info: true},
		{name: "new ReplicaSet of a Deployment that did not opt in: not held", pod: of("plain-2", "rs8", newRevision), skipped: SkipNoStrategy, info: true},
		{name: "new ReplicaSet of a Deployment with a strategy: held", pod: of("placed-2", "rs7", newRevision), verdict: Hold, basis: BasisStrategy, mode: annotations.ModeRequired, info: true, problems: true},
		{name: "new ReplicaSet, revision label not its suffix: held until known", pod: of("plain-2", "rs8"), verdict: Hold, basis: BasisNotCached, mode: annotations.ModeRequired},
		{name: "no strategy", pod: of("plain-1", "rs2"), opts: []Option{WithArchitectures(ArchitectureOptIn)}, skipped: SkipNoStrategy, info: true},
		{name: "no strategy, namespace opted in", namespace: "auto", pod: of("plain-1", "rs2"), opts: []Option{WithArchitectures(ArchitectureOptIn)}, verdict: Hold, basis: BasisArchitecture, mode: annotations.ModeRequired, info: true},
		{name: "no strategy, pod template opted in", pod: of("plain-1", "rs2", ann(annotations.Architectures, "auto")), opts: []Option{WithArchitectures(ArchitectureOptIn)}, verdict: Hold, basis: BasisArchitecture, mode: annotations.ModeRequired, info: true},
		{name: "no strategy, architectures off", namespace: "auto", pod: of("plain-1", "rs2"), skipped: SkipNoStrategy, info: true},
		{name: "no strategy, every pod by architecture", pod: of("plain-1", "rs2"), opts: []Option{WithArchitectures(ArchitectureAlways)}, verdict: Hold, basis: BasisArchitecture, mode: annotations.ModeRequired, info: true},
		{name: "bare pod", pod: of("", "", bare, ann(annotations.Strategy, validStrategy)), skipped: SkipNoStrategy},
		{name: "bare pod, every pod by architecture, shadow", pod: of("", "", bare, ann(annotations.Mode, "shadow")), opts: []Option{WithArchitectures(ArchitectureAlways)}, verdict: Shadow, basis: BasisArchitecture, mode: annotations.ModeShadow},
		{name: "bare pod opted out", pod: of("", "", bare, ann(annotations.Skip, "TRUE")), opts: []Option{WithArchitectures(ArchitectureAlways)}, skipped: SkipOptedOut},
		{name: "owner not followed: as a bare pod", namespace: "auto", pod: of("db", "s1", func(p *corev1.Pod) {
			p.OwnerReferences[0].Kind, p.OwnerReferences[0].APIVersion = "StatefulSet", "apps.kruise.io/v1beta1"
		}),
			opts: []Option{WithArchitectures(ArchitectureOptIn)}, verdict: Hold, basis: BasisArchitecture, mode: annotations.ModeRequired},
		{name: "not cached: held", pod: of("", "", uncached), verdict: Hold, basis: BasisNotCached, mode: annotations.ModeRequired},
		{name: "not cached, default shadow", pod: of("", "", uncached), opts: []Option{WithDefaultMode("shadow")}, verdict: Shadow, basis: BasisNotCached, mode: annotations.ModeShadow},
		{name: "not cached, pod template preferred", pod: of("", "", uncached, ann(annotations.Mode, "preferred")), opts: []Option{WithDefaultMode("shadow")}, verdict: Hold, basis: BasisNotCached, mode: annotations.ModePreferred},
		{name: "not cached, opted out", pod: of("", "", uncached, ann(annotations.Skip, " true ")), skipped: SkipOptedOut},
		{name: "not cached, opt-out may be refused", pod: of("", "", uncached, ann(annotations.Skip, "true")), opts: []Option{WithPolicies(guardedPolicies{noSkip: true})}, verdict: Hold, basis: BasisNotCached, mode: annotations.ModeRequired},
		{name: "not cached, template strategy invalid", pod: of("", "", uncached, ann(annotations.Strategy, "a=b,weight=x")), verdict: Invalid},
		{name: "read error", pod: of("placed-1", "rs1"), reader: failingReader{}, verdict: Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.namespace
			if ns == "" {
				ns = "web"
			}
			r := tc.reader
			if r == nil {
				r = cache
			}
			checked := 0
			opts := append([]Option{WithStrategyCheck(func(raw string) error {
				checked++
				return defaultCheck(raw)
			})}, tc.opts...)
			c := Classify(context.Background(), r, ns, tc.pod, opts...)
			if c.Verdict != tc.verdict || c.Skipped != tc.skipped || c.Basis != tc.basis || c.Mode != tc.mode {
				t.Errorf("class {%v %v %v %q}, want {%v %v %v %q}", c.Verdict, c.Skipped, c.Basis, c.Mode, tc.verdict, tc.skipped, tc.basis, tc.mode)
			}
			if (c.Info != nil) != tc.info || (len(c.Problems) > 0) != tc.problems {
				t.Errorf("info %+v, problems %v; want info %v, problems %v", c.Info, c.Problems, tc.info, tc.problems)
			}
			if (c.Verdict == Invalid) != (c.Invalid != nil) || (c.Verdict == Failed) != (c.Err != nil) {
				t.Errorf("verdict %v with invalid %v, err %v", c.Verdict, c.Invalid, c.Err)
			}
			if checked > 1 {
				t.Errorf("strategy checked %d times, want at most once", checked)
			}
		})
	}
}

func defaultCheck(raw string) error {
	var o resolveOptions
	return o.checkStrategy(raw)
}

// TestClassifyMatchesResolve: a workload's pod is classified from the same
// answer Resolve gives.
func TestClassifyMatchesResolve(t *testing.T) {
	d, rs := test.Workload(map[string]string{annotations.Strategy: validStrategy, annotations.Mode: "preferred", annotations.CapacityTimeout: "5m"})
	cache := memcache.New(test.Scheme())
	if err := cache.Add(d, rs); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{PodTemplateHashLabel: "abc"}, OwnerReferences: owner("ReplicaSet", "apps/v1", rs.Name, rs.UID)}}
	want, err := Resolve(context.Background(), cache, d.Namespace, pod)
	if err != nil {
		t.Fatal(err)
	}
	c := Classify(context.Background(), cache, d.Namespace, pod)
	if c.Info == nil || c.Info.Workload != want.Workload || c.Info.Revision != want.Revision || c.Info.Strategy != want.Strategy ||
		c.Info.Mode != want.Mode || c.Mode != want.Mode || c.Info.CapacityTimeout != want.CapacityTimeout {
		t.Errorf("Classify's info %+v, Resolve's %+v", c.Info, want)
	}
}
