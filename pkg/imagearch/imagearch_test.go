package imagearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/metrics"
)

func TestPlatformString(t *testing.T) {
	for _, c := range []struct {
		p    Platform
		want string
	}{
		{Platform{"linux", "amd64", ""}, "linux/amd64"},
		{Platform{"linux", "arm64", "v8"}, "linux/arm64/v8"},
		{Platform{"windows", "amd64", ""}, "windows/amd64"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.p, got, c.want)
		}
	}
}

func TestIndexes(t *testing.T) {
	reg := newTestRegistry(t)
	for _, docker := range []bool{false, true} {
		t.Run(fmt.Sprintf("docker=%v", docker), func(t *testing.T) {
			ref, _ := reg.pushIndex(fmt.Sprintf("multi/docker-%v:1.0", docker), docker,
				entryOf{platform: plat("linux", "arm64", "v8")},
				entryOf{platform: plat("linux", "amd64", "")},
				attestation,
				entryOf{platform: plat("linux", "arm", "v7")},
				entryOf{platform: plat("linux", "amd64", "")}, // duplicate
				entryOf{platform: nil},                        // no platform
				entryOf{platform: plat("linux", "unknown", "")},
				entryOf{platform: plat("linux", "s390x", ""), annotations: map[string]string{"vnd.docker.reference.type": "attestation-manifest"}},
				entryOf{platform: plat("windows", "amd64", "")},
			)
			reg.resetCounts()
			in := newTestInspector(nil, Options{})
			ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"linux/amd64", "linux/arm/v7", "linux/arm64/v8", "windows/amd64"}
			if got := platformStrings(ps); !slices.Equal(got, want) {
				t.Errorf("platforms = %v, want %v", got, want)
			}
			// One ping, one GET of the index; no HEAD, no blob.
			if p, g, h, b := reg.pings.Load(), reg.manifestGets.Load(), reg.manifestHeads.Load(), reg.blobGets.Load(); p != 1 || g != 1 || h != 0 || b != 0 {
				t.Errorf("requests: %d pings, %d manifest GETs, %d HEADs, %d blob GETs; want 1, 1, 0, 0", p, g, h, b)
			}
		})
	}
}

func TestSingleImage(t *testing.T) {
	reg := newTestRegistry(t)
	for _, p := range []Platform{{"linux", "arm64", "v8"}, {"linux", "amd64", ""}, {"linux", "arm", "v6"}} {
		t.Run(p.String(), func(t *testing.T) {
			ref := reg.pushImage("single/"+p.Architecture+":v1", p)
			reg.resetCounts()
			in := newTestInspector(nil, Options{})
			ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{})
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != 1 || ps[0] != p {
				t.Errorf("platforms = %v, want [%v]", ps, p)
			}
			// One ping, one GET of the manifest, one GET of the config blob.
			if p, g, h, b := reg.pings.Load(), reg.manifestGets.Load(), reg.manifestHeads.Load(), reg.blobGets.Load(); p != 1 || g != 1 || h != 0 || b != 1 {
				t.Errorf("requests: %d pings, %d manifest GETs, %d HEADs, %d blob GETs; want 1, 1, 0, 1", p, g, h, b)
			}
		})
	}
}

func TestNotFoundIsCachedBrieflyAndDoesNotTripTheBreaker(t *testing.T) {
	reg := newTestRegistry(t)
	good := reg.pushImage("app/good:v1", Platform{"linux", "amd64", ""})
	reg.resetCounts()
	clk := clocktesting.NewFakeClock(time.Now())
	in := newTestInspector(nil, Options{BreakerFailures: 2, FailureTTL: time.Hour, Clock: clk})
	missing := reg.ref("app/missing:v1")
	for range 5 {
		_, err := in.Platforms(t.Context(), missing, corev1.PullIfNotPresent, Credentials{})
		if te := (*transport.Error)(nil); !errors.As(err, &te) || te.StatusCode != http.StatusNotFound {
			t.Fatalf("error = %v, want a 404", err)
		}
		if !strings.Contains(err.Error(), missing) {
			t.Errorf("error %q does not name the image", err)
		}
	}
	if g := reg.manifestGets.Load(); g != 1 {
		t.Errorf("negative cache: %d manifest GETs for 5 look-ups, want 1", g)
	}
	clk.SetTime(clk.Now().Add(time.Hour + time.Second))
	if _, err := in.Platforms(t.Context(), missing, corev1.PullIfNotPresent, Credentials{}); err == nil {
		t.Fatal("want an error")
	}
	if g := reg.manifestGets.Load(); g != 2 {
		t.Errorf("after FailureTTL: %d manifest GETs, want 2", g)
	}
	// More 404s than BreakerFailures: the registry still serves.
	for k := range 4 {
		_, err := in.Platforms(t.Context(), reg.ref(fmt.Sprintf("app/missing-%d:v1", k)), corev1.PullIfNotPresent, Credentials{})
		if err == nil || errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("error = %v, want a 404, not an open breaker", err)
		}
	}
	if _, err := in.Platforms(t.Context(), good, corev1.PullIfNotPresent, Credentials{}); err != nil {
		t.Fatalf("after 404s: %v", err)
	}
}

func TestBreaker(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.pushImage("app/x:v1", Platform{"linux", "amd64", ""})
	reg.resetCounts()
	reg.status.Store(http.StatusServiceUnavailable)
	const open = 300 * time.Millisecond
	var logs safeLines
	ctx := log.IntoContext(t.Context(), funcr.New(logs.add, funcr.Options{}))
	before := testutil.ToFloat64(metrics.ImageBreakerOpenTotal.WithLabelValues(reg.host))
	in := newTestInspector(nil, Options{BreakerFailures: 3, BreakerOpen: open})

	for k := range 3 {
		_, err := in.Platforms(ctx, reg.ref(fmt.Sprintf("app/x%d:v1", k)), corev1.PullIfNotPresent, Credentials{})
		if err == nil || errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("look-up %d: error = %v, want a 503", k, err)
		}
	}
	if p, g := reg.pings.Load(), reg.manifestGets.Load(); p != 3 || g != 0 {
		// The ping fails first; remote does not retry (Steps: 1).
		t.Errorf("requests: %d pings, %d manifest GETs; want 3, 0", p, g)
	}
	start := time.Now()
	_, err := in.Platforms(ctx, ref, corev1.PullIfNotPresent, Credentials{})
	if !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("error = %v, want ErrCircuitOpen", err)
	}
	if !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), reg.host) {
		t.Errorf("error %q does not name the image and registry", err)
	}
	if p := reg.pings.Load(); p != 3 {
		t.Errorf("an open breaker let a request through: %d pings", p)
	}
	if got := testutil.ToFloat64(metrics.ImageBreakerOpenTotal.WithLabelValues(reg.host)) - before; got != 1 {
		t.Errorf("breaker_open_total grew by %v, want 1", got)
	}
	if !logs.contains("registry circuit breaker changed state") {
		t.Errorf("state change not logged: %v", logs.all())
	}

	// After BreakerOpen a trial request goes through and closes it.
	reg.status.Store(0)
	time.Sleep(open - time.Since(start) + 50*time.Millisecond)
	ps, err := in.Platforms(ctx, ref, corev1.PullIfNotPresent, Credentials{})
	if err != nil {
		t.Fatalf("trial request: %v", err)
	}
	if len(ps) != 1 || ps[0].Architecture != "amd64" {
		t.Errorf("platforms = %v", ps)
	}
	if _, err := in.Platforms(ctx, reg.ref("app/x0:v1"), corev1.PullAlways, Credentials{}); err == nil || errors.Is(err, ErrCircuitOpen) {
		// x0's failure is still in the negative cache: a 503, not a breaker.
		t.Fatalf("error = %v, want the cached 503", err)
	}
}

func TestCallerDeadlineDetachesTheRequest(t *testing.T) {
	reg := newTestRegistry(t)
	ref, _ := reg.pushIndex("slow/app:v1", false, entryOf{platform: plat("linux", "amd64", "")}, entryOf{platform: plat("linux", "arm64", "")})
	reg.resetCounts()
	release := reg.block()
	in := newTestInspector(nil, Options{})

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := in.Platforms(ctx, ref, corev1.PullIfNotPresent, Credentials{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want the caller's deadline", err)
	}
	if n := in.Len(); n != 0 {
		t.Fatalf("cache has %d entries before the registry answered", n)
	}
	close(release)
	waitFor(t, func() bool { return in.Len() == 1 })

	ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	if got := platformStrings(ps); !slices.Equal(got, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms = %v", got)
	}
	if g := reg.manifestGets.Load(); g != 1 {
		t.Errorf("%d manifest GETs, want 1 (the detached one)", g)
	}
}

// TestHangingRegistryCostsOneTimeout: once a caller waited its whole
// timeout for a look-up, the next callers fail at once while it runs, so a
// burst of pods is not decided one timeout at a time; the look-up's answer is
// used as soon as it arrives.
func TestHangingRegistryCostsOneTimeout(t *testing.T) {
	reg := newTestRegistry(t)
	ref, _ := reg.pushIndex("hang/app:v1", false, entryOf{platform: plat("linux", "arm64", "")})
	reg.resetCounts()
	release := reg.block()
	in := newTestInspector(nil, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := in.Platforms(ctx, ref, corev1.PullIfNotPresent, Credentials{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first caller: %v, want its deadline", err)
	}
	// A caller with all the time in the world is not made to wait.
	for _, call := range []func() error{
		func() error {
			_, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{})
			return err
		},
		func() error {
			_, err := in.Pod(t.Context(), &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: ref}}}})
			return err
		},
	} {
		if err := call(); !errors.Is(err, ErrSlowRegistry) {
			t.Fatalf("caller after a timeout: %v, want ErrSlowRegistry", err)
		}
	}
	close(release)
	waitFor(t, func() bool { return in.Len() == 1 })
	ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{})
	if err != nil || !slices.Equal(platformStrings(ps), []string{"linux/arm64"}) {
		t.Fatalf("after the registry answered: %v, %v", ps, err)
	}
	if g := reg.manifestGets.Load(); g != 1 {
		t.Errorf("%d manifest GETs, want 1", g)
	}
}

func TestTTLByPullPolicy(t *testing.T) {
	reg := newTestRegistry(t)
	ref, _ := reg.pushIndex("ttl/app:v1", false, entryOf{platform: plat("linux", "amd64", "")})
	latest, _ := reg.pushIndex("ttl/app:latest", false, entryOf{platform: plat("linux", "amd64", "")})
	reg.resetCounts()
	clk := clocktesting.NewFakeClock(time.Now())
	in := newTestInspector(nil, Options{IfNotPresentTTL: time.Hour, PullAlwaysTTL: time.Minute, Clock: clk})
	look := func(ref string, policy corev1.PullPolicy, wantGets int64) {
		t.Helper()
		if _, err := in.Platforms(t.Context(), ref, policy, Credentials{}); err != nil {
			t.Fatal(err)
		}
		if g := reg.manifestGets.Load(); g != wantGets {
			t.Fatalf("%s %s: %d manifest GETs, want %d", ref, policy, g, wantGets)
		}
	}
	look(ref, corev1.PullIfNotPresent, 1)
	look(ref, corev1.PullAlways, 1) // fetched just now
	clk.Step(2 * time.Minute)
	look(ref, corev1.PullIfNotPresent, 1)
	look(ref, corev1.PullNever, 1)
	look(ref, corev1.PullAlways, 2) // older than PullAlwaysTTL
	look(ref, corev1.PullAlways, 2)
	look(ref, "", 2) // a tag other than latest defaults to IfNotPresent
	clk.Step(2 * time.Hour)
	look(ref, corev1.PullIfNotPresent, 3)

	look(latest, "", 4) // :latest defaults to Always
	clk.Step(2 * time.Minute)
	look(latest, "", 5)
	look(latest, corev1.PullIfNotPresent, 5)

	// PullAlwaysTTL 0: Always is never served from the cache.
	reg.resetCounts()
	in = newTestInspector(nil, Options{Clock: clk})
	look(ref, corev1.PullAlways, 1)
	look(ref, corev1.PullAlways, 2)
	look(ref, corev1.PullIfNotPresent, 2)
}

func TestDigestNeverExpires(t *testing.T) {
	reg := newTestRegistry(t)
	_, d := reg.pushIndex("pinned/app:v1", false, entryOf{platform: plat("linux", "arm64", "")})
	reg.resetCounts()
	clk := clocktesting.NewFakeClock(time.Now())
	in := newTestInspector(nil, Options{IfNotPresentTTL: time.Minute, PullAlwaysTTL: time.Second, Clock: clk})
	for _, ref := range []string{reg.ref("pinned/app@" + d.String()), reg.ref("pinned/app:v1@" + d.String())} {
		for _, policy := range []corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, ""} {
			if _, err := in.Platforms(t.Context(), ref, policy, Credentials{}); err != nil {
				t.Fatal(err)
			}
			clk.Step(24 * 365 * time.Hour)
		}
	}
	if g := reg.manifestGets.Load(); g != 2 {
		t.Errorf("%d manifest GETs for two digest references, want 2", g)
	}
	item := in.cache.Get(reg.ref("pinned/app@" + d.String()))
	if item == nil || item.TTL() > 0 {
		t.Errorf("digest entry %v: want one without TTL", item)
	}
}

func TestCacheSizeBound(t *testing.T) {
	reg := newTestRegistry(t)
	in := newTestInspector(nil, Options{CacheSize: 3})
	for k := range 5 {
		ref, _ := reg.pushIndex(fmt.Sprintf("many/app%d:v1", k), false, entryOf{platform: plat("linux", "amd64", "")})
		if _, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := in.Len(); n != 3 {
		t.Errorf("Len = %d, want 3", n)
	}
	if got := testutil.ToFloat64(metrics.ImageCacheEntries); got != 3 {
		t.Errorf("cache_entries = %v, want 3", got)
	}
}

func TestCoalescing(t *testing.T) {
	reg := newTestRegistry(t)
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			var ref string
			if single {
				ref = reg.pushImage("burst/single:v1", Platform{"linux", "arm64", ""})
			} else {
				ref, _ = reg.pushIndex("burst/index:v1", false, entryOf{platform: plat("linux", "amd64", "")}, entryOf{platform: plat("linux", "arm64", "")})
			}
			reg.resetCounts()
			in := newTestInspector(nil, Options{})
			const n = 1000
			start := make(chan struct{})
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					<-start
					ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{})
					if err == nil && !supports(ps, "arm64") {
						err = fmt.Errorf("platforms %v", ps)
					}
					errs <- err
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			var blobs int64
			if single {
				blobs = 1 // the config
			}
			if p, g, h, b := reg.pings.Load(), reg.manifestGets.Load(), reg.manifestHeads.Load(), reg.blobGets.Load(); p != 1 || g != 1 || h != 0 || b != blobs {
				t.Errorf("%d concurrent look-ups: %d pings, %d manifest GETs, %d HEADs, %d blob GETs; want 1, 1, 0, %d", n, p, g, h, b, blobs)
			}
		})
	}
}

func TestPodIntersection(t *testing.T) {
	reg := newTestRegistry(t)
	initRef, _ := reg.pushIndex("pod/init:v1", false, entryOf{platform: plat("linux", "amd64", "")}, entryOf{platform: plat("linux", "arm64", "v8")}, attestation)
	appRef, _ := reg.pushIndex("pod/app:v1", true, entryOf{platform: plat("linux", "amd64", "")}, entryOf{platform: plat("linux", "arm64", "")}, entryOf{platform: plat("linux", "ppc64le", "")})
	sideRef, _ := reg.pushIndex("pod/side:v1", false, entryOf{platform: plat("linux", "arm64", "v8")}, entryOf{platform: plat("linux", "amd64", "")}, entryOf{platform: plat("windows", "s390x", "")})
	armOnly := reg.pushImage("pod/armonly:v1", Platform{"linux", "arm64", "v8"})
	amdOnly := reg.pushImage("pod/amdonly:v1", Platform{"linux", "amd64", ""})
	in := newTestInspector(nil, Options{})

	pod := func(inits []string, containers ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}}
		for k, img := range inits {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: fmt.Sprintf("init%d", k), Image: img, ImagePullPolicy: corev1.PullIfNotPresent})
		}
		for k, img := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", k), Image: img, ImagePullPolicy: corev1.PullIfNotPresent})
		}
		return p
	}
	for _, c := range []struct {
		name       string
		pod        *corev1.Pod
		wantImages []string
		wantArchs  []string
	}{
		{"one index", pod(nil, appRef), []string{appRef}, []string{"amd64", "arm64", "ppc64le"}},
		{"init and containers", pod([]string{initRef}, appRef, sideRef, appRef), []string{initRef, appRef, sideRef}, []string{"amd64", "arm64"}},
		{"init narrows", pod([]string{armOnly}, appRef, sideRef), []string{armOnly, appRef, sideRef}, []string{"arm64"}},
		{"none shared", pod([]string{armOnly}, amdOnly), []string{armOnly, amdOnly}, []string{}},
		{"windows does not count", pod(nil, sideRef, appRef), []string{sideRef, appRef}, []string{"amd64", "arm64"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := in.Pod(t.Context(), c.pod)
			if err != nil {
				t.Fatal(err)
			}
			var refs []string
			for _, img := range res.Images {
				refs = append(refs, img.Reference)
				if len(img.Platforms) == 0 {
					t.Errorf("%s: no platforms", img.Reference)
				}
			}
			if !slices.Equal(refs, c.wantImages) {
				t.Errorf("images = %v, want %v", refs, c.wantImages)
			}
			if res.Architectures == nil || !slices.Equal(res.Architectures, c.wantArchs) {
				t.Errorf("architectures = %#v, want %#v", res.Architectures, c.wantArchs)
			}
		})
	}

	_, err := in.Pod(t.Context(), pod([]string{initRef}, appRef, reg.ref("pod/gone:v1")))
	if err == nil || !strings.Contains(err.Error(), reg.ref("pod/gone:v1")) || !strings.Contains(err.Error(), `"c1"`) {
		t.Errorf("error = %v, want one naming container c1 and its image", err)
	}
}

// dockerConfig is a .dockerconfigjson for host.
func dockerConfig(t *testing.T, host, user, pass string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"username": user, "password": pass}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPullSecrets(t *testing.T) {
	reg := newTestRegistry(t)
	reg.user, reg.pass = "robot", "s3cr3t-pa55"
	ref, _ := reg.pushIndex("private/app:v1", false, entryOf{platform: plat("linux", "arm64", "")})
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(t, reg.host, reg.user, reg.pass)},
		}
	}
	kube := fake.NewClientset(
		secret("team", "regcred"),
		secret("other", "podcred"),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "builder"}, ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "default"}},
	)

	t.Run("service account", func(t *testing.T) {
		in := newTestInspector(kube, Options{})
		ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{Namespace: "team", ServiceAccountName: "builder"})
		if err != nil {
			t.Fatal(err)
		}
		if got := platformStrings(ps); !slices.Equal(got, []string{"linux/arm64"}) {
			t.Errorf("platforms = %v", got)
		}
	})
	t.Run("pod imagePullSecrets", func(t *testing.T) {
		in := newTestInspector(kube, Options{})
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "p"}, Spec: corev1.PodSpec{
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "podcred"}},
			Containers:       []corev1.Container{{Name: "app", Image: ref}},
		}}
		res, err := in.Pod(t.Context(), pod)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Architectures, []string{"arm64"}) {
			t.Errorf("architectures = %v", res.Architectures)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		in := newTestInspector(kube, Options{BreakerFailures: 1})
		for range 2 {
			_, err := in.Platforms(t.Context(), ref+"-"+fmt.Sprint(time.Now().UnixNano()), corev1.PullIfNotPresent, Credentials{Namespace: "other"})
			if te := (*transport.Error)(nil); !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized {
				t.Fatalf("error = %v, want a 401 (and not an open breaker)", err)
			}
		}
	})
	t.Run("forbidden service account falls back, logged once", func(t *testing.T) {
		denied := fake.NewClientset(secret("team", "regcred"))
		denied.PrependReactor("get", "serviceaccounts", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, "default", errors.New("rbac"))
		})
		var logs safeLines
		ctx := log.IntoContext(t.Context(), funcr.New(logs.add, funcr.Options{}))
		in := newTestInspector(denied, Options{})
		for k := range 3 {
			_, err := in.Platforms(ctx, reg.ref(fmt.Sprintf("private/app%d:v1", k)), corev1.PullIfNotPresent, Credentials{Namespace: "team", ImagePullSecrets: []string{"regcred"}})
			if te := (*transport.Error)(nil); !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized {
				t.Fatalf("error = %v, want a 401 from anonymous access", err)
			}
		}
		if n := logs.count("cannot read pull credentials"); n != 1 {
			t.Errorf("fallback logged %d times, want once: %v", n, logs.all())
		}
		if logs.contains(reg.pass) {
			t.Errorf("a log line holds the password: %v", logs.all())
		}
	})
	t.Run("missing service account is not an error", func(t *testing.T) {
		in := newTestInspector(kube, Options{})
		_, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{Namespace: "team", ServiceAccountName: "nobody", ImagePullSecrets: []string{"regcred", "absent"}})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a namespace without the secret does not fail one that has it", func(t *testing.T) {
		in := newTestInspector(kube, Options{})
		if _, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{Namespace: "other"}); err == nil {
			t.Fatal("no credentials: want a 401")
		}
		// The 401 is cached for "other" only: "team" asks the registry
		// with its own secret and gets the answer.
		ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{Namespace: "team", ServiceAccountName: "builder"})
		if err != nil || !slices.Equal(platformStrings(ps), []string{"linux/arm64"}) {
			t.Fatalf("with the secret after a 401 without it: %v, %v", ps, err)
		}
		// The platforms were read with team's pull secret: team's next
		// look-up is served from the cache, and a namespace whose
		// credentials could not read the image learns nothing from it.
		reg.resetCounts()
		if _, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{Namespace: "team", ServiceAccountName: "builder"}); err != nil {
			t.Fatalf("cached platforms: %v", err)
		}
		if g := reg.manifestGets.Load(); g != 0 {
			t.Errorf("%d manifest GETs for platforms cached for the same credentials, want 0", g)
		}
		for _, ns := range []string{"other", "third"} {
			ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{Namespace: ns})
			if te := (*transport.Error)(nil); !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized || ps != nil {
				t.Errorf("%s, without credentials, after team read the image: %v, %v; want a 401 and no platforms", ns, ps, err)
			}
		}
		// "third" had no answer cached: it asked the registry itself.
		if n := reg.refused.Load(); n == 0 {
			t.Error("the look-up without credentials never reached the registry: it was answered from the cache")
		}
	})
	t.Run("anonymous answers are shared", func(t *testing.T) {
		open := newTestRegistry(t)
		pub, _ := open.pushIndex("public/app:v1", false, entryOf{platform: plat("linux", "amd64", "")})
		in := newTestInspector(kube, Options{})
		// No pull secret of "other" is for this host: the request is
		// anonymous, and any pod could have read the answer.
		if _, err := in.Platforms(t.Context(), pub, corev1.PullIfNotPresent, Credentials{Namespace: "other"}); err != nil {
			t.Fatal(err)
		}
		open.resetCounts()
		for _, ns := range []string{"third", "fourth"} {
			if _, err := in.Platforms(t.Context(), pub, corev1.PullIfNotPresent, Credentials{Namespace: ns}); err != nil {
				t.Fatal(err)
			}
		}
		if g := open.manifestGets.Load(); g != 0 {
			t.Errorf("%d manifest GETs for an image read anonymously, want 0: its answer is shared", g)
		}
	})
	t.Run("docker config keychain", func(t *testing.T) {
		kc, err := DockerConfigKeychain(t.Context(), dockerConfig(t, reg.host, reg.user, reg.pass))
		if err != nil {
			t.Fatal(err)
		}
		in := newTestInspector(nil, Options{Keychain: func(context.Context, Credentials) (authn.Keychain, error) { return kc, nil }})
		if _, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMetricsByResult(t *testing.T) {
	reg := newTestRegistry(t)
	ref, _ := reg.pushIndex("metrics/app:v1", false, entryOf{platform: plat("linux", "amd64", "")})
	in := newTestInspector(nil, Options{})
	value := func(result string) float64 {
		return testutil.ToFloat64(metrics.ImageLookupsTotal.WithLabelValues(result))
	}
	hit, miss, fail := value("hit"), value("miss"), value("error")
	for range 3 {
		if _, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := in.Platforms(t.Context(), reg.ref("metrics/none:v1"), corev1.PullIfNotPresent, Credentials{}); err == nil {
			t.Fatal("want an error")
		}
	}
	if d := value("hit") - hit; d != 2 {
		t.Errorf("hits grew by %v, want 2", d)
	}
	if d := value("miss") - miss; d != 1 {
		t.Errorf("misses grew by %v, want 1", d)
	}
	if d := value("error") - fail; d != 2 {
		t.Errorf("errors grew by %v, want 2 (one fetched, one from the negative cache)", d)
	}
}

func TestECROnlyForECRHosts(t *testing.T) {
	var calls []string
	kc := authn.NewKeychainFromHelper(ecrOnly{helperFunc(func(url string) (string, string, error) {
		calls = append(calls, url)
		return "AWS", "token", nil
	})})
	for _, host := range []string{"index.docker.io", "ghcr.io", "127.0.0.1:5000", "quay.io", "123456789012.dkr.ecr.us-east-1.amazonaws.com.evil.io"} {
		a, err := kc.Resolve(mustRef(t, host+"/a/b:v1").Context())
		if err != nil || a != authn.Anonymous {
			t.Errorf("%s: %v, %v; want anonymous", host, a, err)
		}
	}
	if len(calls) != 0 {
		t.Errorf("helper called for non-ECR hosts: %v", calls)
	}
	for _, host := range []string{"123456789012.dkr.ecr.us-east-1.amazonaws.com", "public.ecr.aws"} {
		a, err := kc.Resolve(mustRef(t, host+"/a/b:v1").Context())
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := a.Authorization()
		if err != nil || cfg.Username != "AWS" {
			t.Errorf("%s: %+v, %v; want the helper's credentials", host, cfg, err)
		}
	}
	if len(calls) != 2 {
		t.Errorf("helper calls = %v, want the two ECR hosts", calls)
	}

	panicky := authn.NewKeychainFromHelper(ecrOnly{helperFunc(func(string) (string, string, error) { panic("no AWS config") })})
	if a, err := panicky.Resolve(mustRef(t, "123456789012.dkr.ecr.eu-west-1.amazonaws.com/a:v1").Context()); err != nil || a != authn.Anonymous {
		t.Errorf("panicking helper: %v, %v; want anonymous", a, err)
	}

	// The real helper, for a registry that is not ECR: no AWS work, anonymous.
	if a, err := ECRKeychain().Resolve(mustRef(t, "ghcr.io/a/b:v1").Context()); err != nil || a != authn.Anonymous {
		t.Errorf("real ECR keychain on ghcr.io: %v, %v", a, err)
	}
}

type helperFunc func(string) (string, string, error)

func (f helperFunc) Get(url string) (string, string, error) { return f(url) }

func TestBadReference(t *testing.T) {
	in := newTestInspector(nil, Options{BreakerFailures: 1})
	for range 2 {
		_, err := in.Platforms(t.Context(), "Not A Reference", corev1.PullIfNotPresent, Credentials{})
		if err == nil || errors.Is(err, ErrCircuitOpen) || !strings.Contains(err.Error(), "Not A Reference") {
			t.Fatalf("error = %v", err)
		}
	}
}

// waitFor polls cond (for an event, not a duration: no timing assertion).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// safeLines collects log lines from any goroutine.
type safeLines struct {
	mu    sync.Mutex
	lines []string
}

func (s *safeLines) add(prefix, args string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, prefix+" "+args)
}

func (s *safeLines) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

func (s *safeLines) count(sub string) int {
	n := 0
	for _, l := range s.all() {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

func (s *safeLines) contains(sub string) bool { return s.count(sub) > 0 }
