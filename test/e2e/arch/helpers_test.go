//go:build e2e

package arch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	seed004  = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	archKey  = corev1.LabelArchStable // kubernetes.io/arch
	capacity = karpv1.CapacityTypeLabelKey
)

// The test images. Each test serves its own registry (so its request counts
// and apportion's cache entries are its own) with the images it names.
const (
	imgMulti     = "multi:1"       // OCI index: linux/amd64, linux/arm64/v8, and their attestation manifests (unknown/unknown)
	imgAmd64     = "amd64only:1"   // OCI image manifest, linux/amd64
	imgArm64     = "arm64only:1"   // Docker schema 2 manifest, linux/arm64
	imgArm64b    = "arm64only:2"   // same as arm64only:1, a tag no one looks up in opt-in mode
	imgPrivate   = "private/app:1" // OCI image manifest, linux/amd64, basic auth
	imgPrivateSA = "private/app:2" // the same, looked up with a ServiceAccount's secret
	imgPrivateSO = "private/app:3" // the same, with credentials only in the ServiceAccount
	imgPrivateNo = "private/app:4" // the same, looked up without credentials
	imgFresh     = "fresh:1"       // linux/amd64, first looked up while the registry is down
)

// pushImage pushes one of the test images.
func pushImage(ctx context.Context, reg *framework.Registry, repoTag string) error {
	var err error
	switch repoTag {
	case imgMulti:
		_, err = reg.PushIndex(ctx, repoTag, []string{"linux/amd64", "linux/arm64/v8"}, true, framework.ImageOptions{})
	case imgArm64, imgArm64b:
		_, err = reg.PushImage(ctx, repoTag, "linux/arm64", framework.ImageOptions{Docker: true})
	case imgAmd64, imgPrivate, imgPrivateSA, imgPrivateSO, imgPrivateNo, imgFresh:
		_, err = reg.PushImage(ctx, repoTag, "linux/amd64", framework.ImageOptions{})
	default:
		err = fmt.Errorf("no test image %s", repoTag)
	}
	return err
}

// wantPlatforms are the platforms the registry must list for each image.
var wantPlatforms = map[string][]string{
	imgMulti:     {"linux/amd64", "linux/arm64/v8", "unknown/unknown", "unknown/unknown"},
	imgAmd64:     {"linux/amd64"},
	imgArm64:     {"linux/arm64"},
	imgArm64b:    {"linux/arm64"},
	imgPrivate:   {"linux/amd64"},
	imgPrivateSA: {"linux/amd64"},
	imgPrivateSO: {"linux/amd64"},
	imgPrivateNo: {"linux/amd64"},
	imgFresh:     {"linux/amd64"},
}

// newRegistry serves a registry for t with images pushed and read back
// through the cluster's namespace, request counts reset, and logs its request
// counts when t ends.
func newRegistry(t *testing.T, images ...string) *framework.Registry {
	t.Helper()
	reg, err := framework.StartRegistry(env.C)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, img := range images {
		if err := pushImage(ctx, reg, img); err != nil {
			t.Fatal(err)
		}
		got, err := reg.Platforms(ctx, img)
		if err != nil {
			t.Fatalf("reading %s back: %v", reg.Ref(img), err)
		}
		if !slices.Equal(got, wantPlatforms[img]) {
			t.Fatalf("%s lists platforms %v, want %v", reg.Ref(img), got, wantPlatforms[img])
		}
	}
	reg.ResetRequests()
	t.Cleanup(func() {
		t.Logf("registry %s request counts (apportion's look-ups):\n%s", reg.Host, reg.RequestSummary())
	})
	return reg
}

func newNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	return framework.NewNamespace(t, env.Kube, framework.TestNamespaceName(t, "arch"), labels)
}

// deployment is a Deployment of replicas pods running image, with ann on
// its metadata (the strategy goes there).
func deployment(ns, name, image string, replicas int32, ann map[string]string, mutate ...func(*appsv1.Deployment)) *appsv1.Deployment {
	d := framework.Deployment(ns, name, replicas, ann, framework.AppPodSpec(image))
	for _, m := range mutate {
		m(d)
	}
	return d
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

// waitPods waits until name has n live pods, every one satisfying ok.
func waitPods(t *testing.T, ns, name string, n int, timeout time.Duration, what string, ok func(*corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	return framework.WaitPods(t, env.Kube, ns, name, n, timeout, what, ok)
}

// ungated: the placement gate is gone (decided or released).
func ungated(p *corev1.Pod) bool { return !decision.HasGate(p) }

// bound: ungated and bound to a node.
func bound(p *corev1.Pod) bool { return ungated(p) && p.Spec.NodeName != "" }

// waitBound waits until name has n live pods, all bound to nodes.
func waitBound(t *testing.T, ns, name string, n int) []corev1.Pod {
	t.Helper()
	return waitPods(t, ns, name, n, 3*time.Minute, "bound", bound)
}

// placement is one pod with the node it is bound to.
type placement struct {
	pod  corev1.Pod
	node *corev1.Node
}

// nodesOf looks up the node of every (bound) pod.
func nodesOf(t *testing.T, pods []corev1.Pod) []placement {
	t.Helper()
	out := make([]placement, 0, len(pods))
	for _, p := range pods {
		out = append(out, placement{pod: p, node: framework.NodeOf(t, env.Kube, &p)})
	}
	return out
}

// countBy counts the pods by a label of their node.
func countBy(ps []placement, label string) map[string]int {
	out := map[string]int{}
	for _, p := range ps {
		out[p.node.Labels[label]]++
	}
	return out
}

// checkArch asserts every pod runs on an arch node and carries the
// architectures annotation want.
func checkArch(t *testing.T, ps []placement, arch, want string) {
	t.Helper()
	if c := countBy(ps, archKey); c[arch] != len(ps) {
		t.Errorf("pods by node architecture %v, want all %d on %s", c, len(ps), arch)
	}
	for _, p := range ps {
		if got := p.pod.Annotations[annotations.Architectures]; got != want {
			t.Errorf("pod %s: %s = %q, want %q", p.pod.Name, annotations.Architectures, got, want)
		}
	}
}

// checkSplit asserts the seed 004 split by the capacity type of the nodes.
func checkSplit(t *testing.T, ps []placement, onDemand, spot int) {
	t.Helper()
	c := countBy(ps, capacity)
	if c[karpv1.CapacityTypeOnDemand] != onDemand || c[karpv1.CapacityTypeSpot] != spot {
		t.Errorf("pods by node capacity type %v, want on-demand %d, spot %d", c, onDemand, spot)
	} else {
		t.Logf("pods by node capacity type %v, by architecture %v", c, countBy(ps, archKey))
	}
}

// checkNodePools asserts each pod runs in the NodePool its decision names,
// and logs the pools.
func checkNodePools(t *testing.T, ps []placement) {
	t.Helper()
	for _, p := range ps {
		want := p.pod.Annotations[annotations.NodePool]
		if got := p.node.Labels[karpv1.NodePoolLabelKey]; want != "" && got != want {
			t.Errorf("pod %s decided for NodePool %q runs on a node of %q", p.pod.Name, want, got)
		}
	}
	t.Logf("pods by NodePool %v", countBy(ps, karpv1.NodePoolLabelKey))
}

// requiredArch returns the values of every required kubernetes.io/arch In
// requirement, one entry per nodeSelectorTerm (nil for a term without one).
func requiredArch(p *corev1.Pod) [][]string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out [][]string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		var vals []string
		for _, r := range term.MatchExpressions {
			if r.Key == archKey && r.Operator == corev1.NodeSelectorOpIn {
				vals = append(vals, r.Values...)
			}
		}
		out = append(out, vals)
	}
	return out
}

// hasArchConstraint reports whether the pod's required or preferred node
// affinity, or its nodeSelector, names kubernetes.io/arch.
func hasArchConstraint(p *corev1.Pod) bool {
	if _, ok := p.Spec.NodeSelector[archKey]; ok {
		return true
	}
	for _, vals := range requiredArch(p) {
		if len(vals) > 0 {
			return true
		}
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		for _, pt := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			for _, r := range pt.Preference.MatchExpressions {
				if r.Key == archKey {
					return true
				}
			}
		}
	}
	return false
}

// apportionAnnotations lists the pod's annotations under apportion.dev/.
func apportionAnnotations(p *corev1.Pod) []string {
	var out []string
	for k := range p.Annotations {
		if strings.HasPrefix(k, annotations.Prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// decisionReason returns the reason of the pod's decision record, and
// whether the pod has one.
func decisionReason(t *testing.T, p *corev1.Pod) (string, bool) {
	t.Helper()
	raw, ok := p.Annotations[annotations.Decision]
	if !ok {
		return "", false
	}
	var r decision.Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Errorf("pod %s: decision record %q: %v", p.Name, raw, err)
	}
	return r.Reason, true
}

// eventsFor returns the messages of the Events with reason about the
// Deployment name in ns. Events are sent asynchronously, so it waits up to
// wait for at least one before returning what it found (possibly nothing).
func eventsFor(t *testing.T, ns, name, reason string, wait time.Duration) []string {
	t.Helper()
	return framework.Messages(framework.Events(t, env.Kube, ns, wait, func(e *corev1.Event) bool {
		return e.InvolvedObject.Kind == "Deployment" && e.InvolvedObject.Name == name && e.Reason == reason
	}))
}

// allEvents lists every Event in ns as "Kind/name reason: message", for
// failure messages.
func allEvents(t *testing.T, ns string) string {
	t.Helper()
	var list corev1.EventList
	if err := env.Kube.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Pod" && e.Type == corev1.EventTypeNormal {
			continue // scheduling chatter
		}
		fmt.Fprintf(&b, "\n  %s/%s %s %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
	}
	return b.String()
}
