//go:build e2e

package arch_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/test/framework"
)

// logLookups logs how often the registry was asked for repoTag while pods
// pods of it were placed: one manifest GET for any number of pods is the
// cache (and the collapsing of concurrent look-ups) at work.
func logLookups(t *testing.T, reg *framework.Registry, repoTag string, pods int) {
	t.Helper()
	repo, _, _ := strings.Cut(repoTag, ":")
	var blobs int
	for k, n := range reg.Requests() {
		if f := strings.Fields(k); strings.HasPrefix(f[1], "/v2/"+repo+"/blobs/") {
			blobs += n
		}
	}
	t.Logf("registry look-ups for %d pods of %s: manifest GET %d, manifest HEAD %d, blob requests %d, /v2/ pings %d",
		pods, repoTag, reg.Count("GET", framework.ManifestPath(repoTag)), reg.Count("HEAD", framework.ManifestPath(repoTag)), blobs, reg.Count("", "/v2/"))
}

// Case 1: an amd64-only image under seed 004's strategy runs on amd64 only,
// split 4 on-demand / 6 spot.
func TestAmd64OnlyImage(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, imgAmd64)
	ns := newNamespace(t, nil)
	create(t, deployment(ns, "amd64", reg.Ref(imgAmd64), 10, map[string]string{annotations.Strategy: seed004}))
	ps := nodesOf(t, waitBound(t, ns, "amd64", 10))
	checkArch(t, ps, "amd64", "amd64")
	checkSplit(t, ps, 4, 6)
	checkNodePools(t, ps)
	logLookups(t, reg, imgAmd64, 10)
}

// Case 2: an arm64-only image under the same strategy runs on the arm64
// pools only (which Karpenter ranks below the amd64 ones), split 4/6.
func TestArm64OnlyImage(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, imgArm64)
	ns := newNamespace(t, nil)
	create(t, deployment(ns, "arm64", reg.Ref(imgArm64), 10, map[string]string{annotations.Strategy: seed004}))
	ps := nodesOf(t, waitBound(t, ns, "arm64", 10))
	checkArch(t, ps, "arm64", "arm64")
	checkSplit(t, ps, 4, 6)
	checkNodePools(t, ps)
	for _, p := range ps {
		if pool := p.node.Labels[karpv1.NodePoolLabelKey]; pool != "on-demand-arm64" && pool != "spot-arm64" {
			t.Errorf("pod %s runs in NodePool %s, want an arm64 pool", p.pod.Name, pool)
		}
	}
	logLookups(t, reg, imgArm64, 10)
}

// A multi-arch index whose attestation manifests are listed as
// unknown/unknown: the pods may run on amd64 and arm64, and nothing else.
func TestMultiArchIndex(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, imgMulti)
	ns := newNamespace(t, nil)
	create(t, deployment(ns, "multi", reg.Ref(imgMulti), 4, map[string]string{annotations.Strategy: seed004}))
	ps := nodesOf(t, waitBound(t, ns, "multi", 4))
	for _, p := range ps {
		if got := p.pod.Annotations[annotations.Architectures]; got != "amd64,arm64" {
			t.Errorf("pod %s: %s = %q, want \"amd64,arm64\" (the attestation manifests are no platform)", p.pod.Name, annotations.Architectures, got)
		}
		terms := requiredArch(&p.pod)
		if len(terms) == 0 {
			t.Errorf("pod %s has no required node affinity", p.pod.Name)
		}
		for i, vals := range terms {
			if slices.Sort(vals); !slices.Equal(vals, []string{"amd64", "arm64"}) {
				t.Errorf("pod %s term %d: kubernetes.io/arch In %v, want [amd64 arm64]", p.pod.Name, i, vals)
			}
		}
		if a := p.node.Labels[archKey]; a != "amd64" && a != "arm64" {
			t.Errorf("pod %s runs on a %s node", p.pod.Name, a)
		}
	}
	t.Logf("pods by node architecture %v, capacity type %v", countBy(ps, archKey), countBy(ps, capacity))
	logLookups(t, reg, imgMulti, 4)
}

// Case 3: a strategy with an arm64 group and an amd64-only image: the arm64
// group is left out of the split, with a Warning Event that names the image.
func TestArchGroupUnavailable(t *testing.T) {
	t.Parallel()
	const spec = "kubernetes.io/arch=arm64,weight=1:kubernetes.io/arch=amd64,weight=1"
	reg := newRegistry(t, imgAmd64)
	ns := newNamespace(t, nil)
	create(t, deployment(ns, "halves", reg.Ref(imgAmd64), 4, map[string]string{annotations.Strategy: spec}))
	ps := nodesOf(t, waitBound(t, ns, "halves", 4))
	checkArch(t, ps, "amd64", "amd64")
	for _, p := range ps {
		if g := p.pod.Annotations[annotations.Group]; g != "kubernetes.io/arch=amd64" {
			t.Errorf("pod %s in group %q, want kubernetes.io/arch=amd64", p.pod.Name, g)
		}
	}
	msgs := eventsFor(t, ns, "halves", "GroupUnavailable", 30*time.Second)
	named := slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, imgAmd64) })
	if !named {
		t.Errorf("no GroupUnavailable Event on the Deployment naming %s; got %q; events in the namespace:%s", imgAmd64, msgs, allEvents(t, ns))
	} else {
		t.Logf("GroupUnavailable: %q", msgs)
	}
	logLookups(t, reg, imgAmd64, 4)
}

// Case 4: a Deployment without a strategy in a namespace labelled
// apportion.dev/architectures=auto gets the architecture of its image only
// (no NodePool pin);
// the same Deployment in an unlabelled namespace is left alone.
func TestArchitectureOnlyNamespace(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, imgArm64, imgArm64b)
	auto := newNamespace(t, map[string]string{annotations.Architectures: "auto"})
	plain := newNamespace(t, nil)
	create(t, deployment(auto, "plain", reg.Ref(imgArm64), 3, nil))
	create(t, deployment(plain, "plain", reg.Ref(imgArm64b), 3, nil))

	ps := nodesOf(t, waitBound(t, auto, "plain", 3))
	checkArch(t, ps, "arm64", "arm64")
	for _, p := range ps {
		terms := requiredArch(&p.pod)
		if len(terms) == 0 {
			t.Errorf("pod %s has no required node affinity", p.pod.Name)
		}
		for i, vals := range terms {
			if !slices.Equal(vals, []string{"arm64"}) {
				t.Errorf("pod %s term %d: kubernetes.io/arch In %v, want [arm64]", p.pod.Name, i, vals)
			}
		}
		// No NodePool pin: Karpenter falls back across its pools itself.
		if pool, ok := p.pod.Annotations[annotations.NodePool]; ok {
			t.Errorf("pod %s placed by architecture alone carries %s=%q", p.pod.Name, annotations.NodePool, pool)
		}
		if len(terms) == 0 {
			continue
		}
		for _, term := range p.pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, req := range term.MatchExpressions {
				if req.Key == karpv1.NodePoolLabelKey {
					t.Errorf("pod %s placed by architecture alone is pinned: %v", p.pod.Name, req)
				}
			}
		}
	}
	checkNodePools(t, ps)
	logLookups(t, reg, imgArm64, 3)

	for _, p := range waitBound(t, plain, "plain", 3) {
		if keys := apportionAnnotations(&p); len(keys) > 0 {
			t.Errorf("pod %s in the unlabelled namespace carries %v", p.Name, keys)
		}
		if hasArchConstraint(&p) {
			t.Errorf("pod %s in the unlabelled namespace has an architecture constraint: %+v", p.Name, p.Spec.Affinity)
		}
	}
	if n := reg.Count("", framework.ManifestPath(imgArm64b)); n != 0 {
		t.Errorf("the image of the unlabelled namespace was looked up %d times; in opt-in mode it is not inspected", n)
	}
}

// Case 5: a private image (basic auth), with the credentials in an
// imagePullSecret of the pod template, and in the imagePullSecrets of the
// pods' ServiceAccount.
//
// The API server's ServiceAccount admission copies the account's
// imagePullSecrets into a pod that names none, so "by-sa" pods carry the
// secret by the time apportion sees them. "sa-only" pods name an unrelated
// pull secret (for another registry), which keeps the account's from being
// copied: their credentials are found through the ServiceAccount alone.
// "no-creds" pods have none: the registry refuses them, so they are placed
// without an architecture (which shows the registry does require them).
func TestPrivateImage(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, imgPrivate, imgPrivateSA, imgPrivateSO, imgPrivateNo)
	ns := newNamespace(t, nil)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "regcred"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfigJSON()},
	})
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-registry"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.invalid":{"username":"x","password":"y","auth":"eDp5"}}}`)},
	})
	create(t, &corev1.ServiceAccount{
		ObjectMeta:       metav1.ObjectMeta{Namespace: ns, Name: "puller"},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
	})
	strategy := map[string]string{annotations.Strategy: seed004}
	create(t, deployment(ns, "by-secret", reg.Ref(imgPrivate), 2, strategy, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	}))
	create(t, deployment(ns, "by-sa", reg.Ref(imgPrivateSA), 2, strategy, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.ServiceAccountName = "puller"
	}))
	create(t, deployment(ns, "sa-only", reg.Ref(imgPrivateSO), 2, strategy, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.ServiceAccountName = "puller"
		d.Spec.Template.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "other-registry"}}
	}))

	create(t, deployment(ns, "no-creds", reg.Ref(imgPrivateNo), 2, strategy))

	for _, app := range []string{"by-secret", "by-sa", "sa-only"} {
		pods := waitBound(t, ns, app, 2)
		t.Logf("%s: pods' imagePullSecrets after admission: %v", app, pods[0].Spec.ImagePullSecrets)
		if app == "sa-only" && slices.ContainsFunc(pods[0].Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == "regcred" }) {
			t.Errorf("sa-only pods carry the ServiceAccount's secret: the case does not test the ServiceAccount route")
		}
		checkArch(t, nodesOf(t, pods), "amd64", "amd64")
		if msgs := eventsFor(t, ns, app, "ImageInspectionFailed", 0); len(msgs) > 0 {
			t.Errorf("ImageInspectionFailed on %s: %q", app, msgs)
		}
	}
	for _, p := range waitBound(t, ns, "no-creds", 2) {
		if a, ok := p.Annotations[annotations.Architectures]; ok || hasArchConstraint(&p) {
			t.Errorf("no-creds pod %s has architectures %q / a constraint, although the registry refuses it", p.Name, a)
		}
	}
	if msgs := eventsFor(t, ns, "no-creds", "ImageInspectionFailed", 30*time.Second); len(msgs) == 0 {
		t.Errorf("no ImageInspectionFailed Event on no-creds; events in the namespace:%s", allEvents(t, ns))
	} else {
		t.Logf("no-creds: ImageInspectionFailed: %q", msgs)
	}
	if n := reg.Count("", "/v2/private/app/manifests/4"); n == 0 {
		t.Errorf("no-creds: the registry was never asked for %s", imgPrivateNo)
	}
	for _, img := range []string{imgPrivate, imgPrivateSA, imgPrivateSO, imgPrivateNo} {
		logLookups(t, reg, img, 2)
	}
}

// Case 6: the registry stops answering mid-test. Pods of a tag never looked
// up before are placed by the controller, without an architecture
// constraint, well within the gate timeout, with a Warning Event.
func TestRegistryStopped(t *testing.T) {
	t.Parallel()
	testRegistryDown(t, "stopped", func(reg *framework.Registry) {
		if err := reg.Stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// Case 6, the other way a registry fails: it accepts connections and never
// answers, so only --image-timeout bounds the look-up.
func TestRegistryHangs(t *testing.T) {
	t.Parallel()
	testRegistryDown(t, "hanging", func(reg *framework.Registry) { reg.SetMode(framework.RegistryHanging) })
}

func testRegistryDown(t *testing.T, how string, down func(*framework.Registry)) {
	reg := newRegistry(t, imgAmd64, imgFresh)
	ns := newNamespace(t, nil)
	strategy := map[string]string{annotations.Strategy: seed004}

	// While the registry answers, pods get their architecture.
	create(t, deployment(ns, "before", reg.Ref(imgAmd64), 2, strategy))
	checkArch(t, nodesOf(t, waitBound(t, ns, "before", 2)), "amd64", "amd64")

	d := deployment(ns, "fresh", reg.Ref(imgFresh), 0, strategy)
	create(t, d)
	down(reg)
	t.Logf("registry %s is %s", reg.Host, how)
	start := time.Now()
	scale(t, d, 6)
	pods := waitPods(t, ns, "fresh", 6, gateTimeout+2*time.Minute, "ungated", ungated)
	placed := time.Since(start)
	t.Logf("registry %s: 6 pods ungated %.1fs after the scale (gate timeout %s, image timeout %s)", how, placed.Seconds(), gateTimeout, imageTimeout)
	if placed >= gateTimeout {
		t.Errorf("the pods were ungated only after %.1fs, not within the gate timeout %s", placed.Seconds(), gateTimeout)
	}
	reasons := map[string]int{}
	for i := range pods {
		p := &pods[i]
		reason, ok := decisionReason(t, p)
		reasons[reason]++
		switch {
		case !ok:
			t.Errorf("pod %s was released without a decision (annotations %v): the gate janitor's timeout, not the controller", p.Name, apportionAnnotations(p))
		case strings.Contains(strings.ToLower(reason), "timeout"):
			t.Errorf("pod %s: decision reason %q: released by a timeout", p.Name, reason)
		}
		if hasArchConstraint(p) {
			t.Errorf("pod %s has an architecture constraint although its image could not be read: %+v", p.Name, p.Spec.Affinity.NodeAffinity)
		}
		if a, ok := p.Annotations[annotations.Architectures]; ok {
			t.Errorf("pod %s: %s = %q although its image could not be read", p.Name, annotations.Architectures, a)
		}
	}
	t.Logf("registry %s: decision reasons %v", how, reasons)
	ps := nodesOf(t, waitBound(t, ns, "fresh", 6))
	t.Logf("registry %s: 6 pods bound %.1fs after the scale", how, time.Since(start).Seconds())
	checkSplit(t, ps, 3, 3)
	msgs := eventsFor(t, ns, "fresh", "ImageInspectionFailed", 30*time.Second)
	if len(msgs) == 0 {
		t.Errorf("no ImageInspectionFailed Event on the Deployment; events in the namespace:%s", allEvents(t, ns))
	} else {
		t.Logf("ImageInspectionFailed: %q", msgs)
	}
	logLookups(t, reg, imgFresh, 6)
	// The registry answers again as before (the helper's Restart).
	if err := reg.Restart(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if got, err := reg.Platforms(ctx, imgFresh); err != nil || !slices.Equal(got, wantPlatforms[imgFresh]) {
		t.Errorf("after Restart, %s lists %v, %v", reg.Ref(imgFresh), got, err)
	}
}
