package imagearch

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/registries"
)

func deniedCount(r registries.Reason) float64 {
	return testutil.ToFloat64(metrics.ImageRegistryDeniedTotal.WithLabelValues(string(r)))
}

func policy(t *testing.T, raw string) *registries.Policy {
	t.Helper()
	p, err := registries.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// By default a reference to a loopback registry is refused before any
// request, with an error that says so, counted once per look-up, cached like
// any failure, and not held against the registry's breaker.
func TestLoopbackRegistryDeniedByDefault(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.pushImage("app/x:v1", Platform{"linux", "amd64", ""})
	reg.resetCounts()
	clk := clocktesting.NewFakeClock(time.Now())
	in := New(nil, Options{BreakerFailures: 1, FailureTTL: time.Minute, Clock: clk}) // the default policy
	before := deniedCount(registries.ReasonLoopback)
	for range 3 {
		_, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{})
		d := (*registries.DeniedError)(nil)
		if !errors.As(err, &d) || d.Reason != registries.ReasonLoopback {
			t.Fatalf("error = %v, want a loopback denial", err)
		}
		want := "registry host " + reg.host + " is not allowed by settings.imageRegistries (loopback)"
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ref) {
			t.Errorf("error %q, want the image and %q", err, want)
		}
	}
	if n := reg.pings.Load() + reg.manifestGets.Load() + reg.manifestHeads.Load() + reg.blobGets.Load(); n != 0 {
		t.Errorf("the registry got %d requests, want none", n)
	}
	if got := deniedCount(registries.ReasonLoopback) - before; got != 1 {
		t.Errorf("registry_denied_total{loopback} grew by %v, want 1 (one look-up, then the negative cache)", got)
	}
	clk.Step(time.Minute + time.Second)
	if _, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{}); err == nil {
		t.Fatal("want an error")
	}
	if got := deniedCount(registries.ReasonLoopback) - before; got != 2 {
		t.Errorf("after FailureTTL: registry_denied_total{loopback} grew by %v, want 2", got)
	}

	// The same registry allowed: the breaker did not open on the denials.
	in = newTestInspector(nil, Options{BreakerFailures: 1})
	if _, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{}); err != nil {
		t.Fatalf("allowed: %v", err)
	}
}

func TestRegistryHostsOfThePolicy(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.pushImage("app/x:v1", Platform{"linux", "arm64", ""})
	_, port, _ := strings.Cut(reg.host, ":")
	for _, c := range []struct {
		name, policy, ref string
		want              registries.Reason // "": allowed
	}{
		{"the exact host and port", `{"allow":["127.0.0.1:` + port + `"]}`, ref, ""},
		{"a range of addresses", `{"allow":["127.0.0.0/8"]}`, ref, ""},
		{"another port", `{"allow":["127.0.0.1:1"]}`, ref, registries.ReasonLoopback},
		{"the registry as localhost", `{"allow":["127.0.0.1"]}`, "localhost:" + port + "/app/x:v1", registries.ReasonLoopback},
		{"the metadata service", `{"allow":["127.0.0.1"]}`, "169.254.169.254/latest:v1", registries.ReasonLinkLocal},
		{"a Service name", `{"allow":["127.0.0.1"]}`, "registry.tools.svc.cluster.local:5000/app:v1", registries.ReasonClusterName},
		{"a name without a dot", `{"allow":["127.0.0.1"]}`, "registry:5000/app:v1", registries.ReasonClusterName},
		{"a deny entry", `{"allow":["127.0.0.1"],"deny":["*.corp.example"]}`, "registry.corp.example/app:v1", registries.ReasonDenyEntry},
		{"deny all but the allowed", `{"allow":["127.0.0.1"],"deny":["*"]}`, "ghcr.io/app:v1", registries.ReasonDenyEntry},
		{"deny all but the allowed, the allowed", `{"allow":["127.0.0.1"],"deny":["*"]}`, ref, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg.resetCounts()
			in := New(nil, Options{Registries: policy(t, c.policy)})
			before := deniedCount(c.want)
			ps, err := in.Platforms(t.Context(), c.ref, corev1.PullIfNotPresent, Credentials{})
			if c.want == "" {
				if err != nil || len(ps) != 1 || ps[0].Architecture != "arm64" {
					t.Fatalf("platforms %v, error %v; want linux/arm64", ps, err)
				}
				return
			}
			d := (*registries.DeniedError)(nil)
			if !errors.As(err, &d) || d.Reason != c.want {
				t.Fatalf("error = %v, want a %s denial", err, c.want)
			}
			if !strings.Contains(err.Error(), "is not allowed by settings.imageRegistries") {
				t.Errorf("error %q does not say why", err)
			}
			if n := reg.pings.Load() + reg.manifestGets.Load(); n != 0 {
				t.Errorf("the registry got %d requests", n)
			}
			if got := deniedCount(c.want) - before; got != 1 {
				t.Errorf("registry_denied_total{%s} grew by %v, want 1", c.want, got)
			}
		})
	}
}

// A registry that redirects a blob to a denied host (go-containerregistry
// itself refuses redirects to private and link-local IP addresses, not to
// names): refused at the redirect, without naming the host the registry
// chose, and the registry's breaker stays closed.
func TestRedirectToADeniedHost(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.pushImage("app/x:v1", Platform{"linux", "amd64", ""})
	_, port, _ := strings.Cut(reg.host, ":")
	to := "http://localhost:" + port + "/internal/?secret=hunter2"
	reg.blobsTo.Store(&to)
	in := newTestInspector(nil, Options{BreakerFailures: 1}) // allows 127.0.0.1, not localhost
	before := deniedCount(registries.ReasonLoopback)
	_, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{})
	d := (*registries.DeniedError)(nil)
	if !errors.As(err, &d) || d.Reason != registries.ReasonLoopback {
		t.Fatalf("error = %v, want a loopback denial", err)
	}
	msg := err.Error()
	want := "getting the image config from " + reg.host + ": the registry sent apportion to a host that settings.imageRegistries does not allow (loopback)"
	if !strings.Contains(msg, want) || strings.Contains(msg, "localhost") || strings.Contains(msg, "hunter2") {
		t.Errorf("error %q, want %q and not the redirect's URL", msg, want)
	}
	if got := deniedCount(registries.ReasonLoopback) - before; got != 1 {
		t.Errorf("registry_denied_total{loopback} grew by %v, want 1", got)
	}
	// Another image of the registry is still looked up: no open breaker.
	reg.blobsTo.Store(nil)
	other := reg.pushImage("app/y:v1", Platform{"linux", "arm64", ""})
	if _, err := in.Platforms(t.Context(), other, corev1.PullIfNotPresent, Credentials{}); err != nil {
		t.Fatalf("after the denied redirect: %v", err)
	}
}

// go-containerregistry's own refusal of a redirect to a private or
// link-local address is told without the address.
func TestRedirectToALinkLocalAddress(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.pushImage("app/x:v1", Platform{"linux", "amd64", ""})
	to := "http://169.254.169.254/latest/meta-data/?secret=hunter2"
	reg.blobsTo.Store(&to)
	in := newTestInspector(nil, Options{})
	_, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{})
	if err == nil || !strings.Contains(err.Error(), "redirected to a private or link-local address") ||
		strings.Contains(err.Error(), "169.254") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error = %v, want the refused redirect without its URL", err)
	}
}
