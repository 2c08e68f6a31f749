package placement_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/imagearch"
	"github.com/apportion-dev/apportion/pkg/test"
)

// fakeImages answers every pod with the same result or error and records
// the deadline it was given.
type fakeImages struct {
	res      *imagearch.Result
	err      error
	deadline time.Duration
	calls    int
}

func (f *fakeImages) Pod(ctx context.Context, _ *corev1.Pod) (*imagearch.Result, error) {
	f.calls++
	if d, ok := ctx.Deadline(); ok {
		f.deadline = time.Until(d)
	}
	return f.res, f.err
}

func result(ref string, archs ...string) *imagearch.Result {
	img := imagearch.Image{Reference: ref}
	for _, a := range archs {
		img.Platforms = append(img.Platforms, imagearch.Platform{OS: "linux", Architecture: a})
	}
	return &imagearch.Result{Images: []imagearch.Image{img}, Architectures: archs}
}

// archPools are the e2e suite's four pools: on-demand and spot, each for
// amd64 and arm64, amd64 heavier.
func archPools() []*karpv1.NodePool {
	pool := func(name string, weight int32, ct, arch string) *karpv1.NodePool {
		np := nodePool(name, weight, ct)
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, test.Requirement(corev1.LabelArchStable, arch))
		return np
	}
	return []*karpv1.NodePool{pool("od-amd64", 30, "on-demand", "amd64"), pool("od-arm64", 20, "on-demand", "arm64"),
		pool("spot-amd64", 50, "spot", "amd64"), pool("spot-arm64", 40, "spot", "arm64")}
}

func requiredArch(pod *corev1.Pod) []string {
	na := pod.Spec.Affinity.NodeAffinity
	if na == nil || na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	for _, r := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions {
		if r.Key == corev1.LabelArchStable {
			return r.Values
		}
	}
	return nil
}

func drainEvents(f *fixture) string {
	var all []string
	for {
		select {
		case e := <-f.recorder.Events:
			all = append(all, e)
		default:
			return strings.Join(all, "\n")
		}
	}
}

// TestArm64OnlyImageKeepsTheSplitOnArm64Pools: seed 004 with arm64-only
// images still splits 4/6, every pod pinned to an arm64 pool with the
// architecture required.
func TestArm64OnlyImageKeepsTheSplitOnArm64Pools(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, test.Objects(archPools()...)...)
	images := &fakeImages{res: result("example.com/app:1", "arm64")}
	f.ctrl.WithImages(images, 2*time.Second)
	pools := map[string]int{}
	for i := range 10 {
		pod := f.reconcile(t, f.gatedPod(t, i))
		if got := requiredArch(pod); len(got) != 1 || got[0] != "arm64" {
			t.Fatalf("pod %d: required arch %v, want [arm64]", i, got)
		}
		if pod.Annotations[annotations.Architectures] != "arm64" {
			t.Fatalf("pod %d: annotation %q", i, pod.Annotations[annotations.Architectures])
		}
		pools[pod.Annotations[annotations.NodePool]]++
	}
	if pools["od-arm64"] != 4 || pools["spot-arm64"] != 6 || len(pools) != 2 {
		t.Fatalf("pools %v, want od-arm64 4 and spot-arm64 6", pools)
	}
	if images.deadline <= 0 || images.deadline > 2*time.Second {
		t.Errorf("inspection deadline %s, want within the image timeout", images.deadline)
	}
}

// TestGroupWithAnotherArchitectureIsLeftOut: an arm64 group and amd64-only
// images: every pod goes to the amd64 group, with an Event naming the image.
func TestGroupWithAnotherArchitectureIsLeftOut(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: "kubernetes.io/arch=arm64,weight=1:kubernetes.io/arch=amd64,weight=1"}, test.Objects(archPools()...)...)
	f.ctrl.WithImages(&fakeImages{res: result("example.com/amd64only:1", "amd64")}, time.Second)
	for i := range 4 {
		pod := f.reconcile(t, f.gatedPod(t, i))
		if pod.Annotations[annotations.Group] != "kubernetes.io/arch=amd64" {
			t.Fatalf("pod %d: group %q", i, pod.Annotations[annotations.Group])
		}
	}
	ev := drainEvents(f)
	if !strings.Contains(ev, "GroupUnavailable") || !strings.Contains(ev, "example.com/amd64only:1: linux/amd64") {
		t.Fatalf("events:\n%s\nwant GroupUnavailable naming the image", ev)
	}
}

// TestNoCompatibleGroupReleasesUnconstrained: the only group is arm64 and the
// images are amd64-only: the pod is released without any constraint.
func TestNoCompatibleGroupReleasesUnconstrained(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: "kubernetes.io/arch=arm64,weight=1"}, test.Objects(archPools()...)...)
	f.ctrl.WithImages(&fakeImages{res: result("example.com/amd64only:1", "amd64")}, time.Second)
	pod := f.reconcile(t, f.gatedPod(t, 0))
	if len(pod.Spec.SchedulingGates) != 0 || pod.Spec.Affinity != nil || pod.Annotations[annotations.Group] != "" {
		t.Fatalf("pod %+v: want released unconstrained", pod.Spec)
	}
	if ev := drainEvents(f); !strings.Contains(ev, "NoCompatibleArchitecture") {
		t.Fatalf("events:\n%s\nwant NoCompatibleArchitecture", ev)
	}
}

// TestInspectionFailurePlacesWithoutArchitecture: a registry error never
// blocks the pod: the split goes on without an architecture constraint, one
// Event per workload however many pods fail.
func TestInspectionFailurePlacesWithoutArchitecture(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, test.Objects(archPools()...)...)
	f.ctrl.WithImages(&fakeImages{err: errors.New("example.com/app:1: connection refused")}, time.Second)
	for i := range 3 {
		pod := f.reconcile(t, f.gatedPod(t, i))
		if len(pod.Spec.SchedulingGates) != 0 || pod.Annotations[annotations.Group] == "" {
			t.Fatalf("pod %d not placed: %v", i, pod.Annotations)
		}
		if got := requiredArch(pod); got != nil {
			t.Fatalf("pod %d: arch %v, want none", i, got)
		}
	}
	if ev := drainEvents(f); strings.Count(ev, "ImageInspectionFailed") != 1 {
		t.Fatalf("events:\n%s\nwant exactly one ImageInspectionFailed", ev)
	}
}

// TestUserArchitectureIsRespected: the user's own nodeSelector arch is kept
// and ANDed: the pool chosen runs it.
func TestUserArchitectureIsRespected(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, test.Objects(archPools()...)...)
	f.ctrl.WithImages(&fakeImages{res: result("example.com/multi:1", "amd64", "arm64")}, time.Second)
	pod := f.reconcile(t, f.gatedPod(t, 0, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelArchStable: "arm64"} }))
	if pod.Annotations[annotations.NodePool] != "od-arm64" || pod.Spec.NodeSelector[corev1.LabelArchStable] != "arm64" {
		t.Fatalf("nodepool %q nodeSelector %v: want od-arm64 and the user's selector kept", pod.Annotations[annotations.NodePool], pod.Spec.NodeSelector)
	}
}

// TestArchitectureOnlyPlacement: a gated pod without a strategy (its
// namespace opted in) gets the architectures only: no group and no NodePool
// pin, so that Karpenter falls back across its pools as for any pod.
func TestArchitectureOnlyPlacement(t *testing.T) {
	optedIn := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{annotations.Architectures: "auto"}}}
	f := newFixture(t, nil, append(test.Objects(archPools()...), optedIn)...)
	f.ctrl.WithImages(&fakeImages{res: result("example.com/arm64only:1", "arm64")}, time.Second)
	pod := f.reconcile(t, f.gatedPod(t, 0))
	if _, ok := pod.Annotations[annotations.Group]; ok || len(pod.Spec.SchedulingGates) != 0 {
		t.Fatalf("annotations %v gates %v: want no group and no gate", pod.Annotations, pod.Spec.SchedulingGates)
	}
	if got := requiredArch(pod); len(got) != 1 || got[0] != "arm64" {
		t.Fatalf("arch %v: want arm64", got)
	}
	if pool, ok := pod.Annotations[annotations.NodePool]; ok {
		t.Fatalf("nodepool annotation %q: want none", pool)
	}
	for _, term := range pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, req := range term.MatchExpressions {
			if req.Key == karpv1.NodePoolLabelKey {
				t.Fatalf("required %v: want no %s pin", req, karpv1.NodePoolLabelKey)
			}
		}
	}
	// A bare pod too.
	bare := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "bare", UID: "bare", CreationTimestamp: metav1.NewTime(now)}, Gated: true})
	if err := f.client.Create(context.Background(), bare); err != nil {
		t.Fatal(err)
	}
	if got := f.reconcile(t, bare); got.Annotations[annotations.Architectures] != "arm64" || len(got.Spec.SchedulingGates) != 0 {
		t.Fatalf("bare pod: annotations %v gates %v", got.Annotations, got.Spec.SchedulingGates)
	}
	// Failing inspection releases it unconstrained.
	f.ctrl.WithImages(&fakeImages{err: errors.New("timeout")}, time.Second)
	if got := f.reconcile(t, f.gatedPod(t, 1)); got.Spec.Affinity != nil || len(got.Spec.SchedulingGates) != 0 {
		t.Fatalf("failed inspection: %+v, want released unconstrained", got.Spec)
	}
}

// TestStraysCountByTheirNode: two pods admitted without a decision run on an
// on-demand node; the next decision counts them as on-demand (seed 004's
// base) and sends the pod to spot.
func TestStraysCountByTheirNode(t *testing.T) {
	node := test.Node("od-node", map[string]string{karpv1.CapacityTypeLabelKey: "on-demand"})
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, node, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	f.ctrl.WithNodes(f.client)
	for i := range 2 {
		stray := f.gatedPod(t, 100+i, func(p *corev1.Pod) { p.Spec.SchedulingGates = nil; p.Spec.NodeName = "od-node" })
		f.tally.Observe(stray)
	}
	pod := f.reconcile(t, f.gatedPod(t, 0))
	if pod.Annotations[annotations.Group] != "karpenter.sh/capacity-type=spot" || !strings.Contains(pod.Annotations[annotations.Decision], `"counts":[0,0],"strays":[2,0]`) {
		t.Fatalf("group %q decision %s: want spot after counting the 2 strays as on-demand", pod.Annotations[annotations.Group], pod.Annotations[annotations.Decision])
	}
}

// TestGatedWithoutOptInIsReleasedUnchanged: the webhook gates the pods of a
// ReplicaSet its cache has not seen yet before it knows what the workload
// asked for. Once resolved, a Deployment with no strategy, no policy and no
// architecture opt-in gets its pods back unchanged: no NodePool pin, no
// architecture, no annotation. With --architectures=all they are placed by
// architecture.
func TestGatedWithoutOptInIsReleasedUnchanged(t *testing.T) {
	f := newFixture(t, nil, test.Objects(archPools()...)...)
	f.ctrl.WithImages(&fakeImages{res: result("example.com/app:1", "amd64")}, time.Second)
	bare := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "bare", UID: "bare", CreationTimestamp: metav1.NewTime(now)}, Gated: true})
	if err := f.client.Create(context.Background(), bare); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []*corev1.Pod{f.gatedPod(t, 0), bare} {
		got := f.reconcile(t, pod)
		if len(got.Spec.SchedulingGates) != 0 || got.Spec.Affinity != nil || len(got.Spec.Tolerations) != 0 {
			t.Fatalf("%s: gates %v affinity %+v tolerations %v: want released unchanged", pod.Name, got.Spec.SchedulingGates, got.Spec.Affinity, got.Spec.Tolerations)
		}
		for k := range got.Annotations {
			if strings.HasPrefix(k, annotations.Prefix) {
				t.Fatalf("%s: annotation %s: want none of apportion's", pod.Name, k)
			}
		}
	}
	f.ctrl.ArchitecturesForAll(true)
	if got := f.reconcile(t, f.gatedPod(t, 1)); len(requiredArch(got)) != 1 {
		t.Fatalf("--architectures=all: arch %v, want amd64", requiredArch(got))
	}
}
