//go:build e2e

package arch_test

import (
	"bufio"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/test/framework"
)

// Outbound requests. The replicas allow the suite's registries on 127.0.0.1
// (framework.ImageRegistriesArg); the same registry named localhost is a
// loopback host the setting does not allow: its pods are placed without an
// architecture constraint, with an Event that says why, and the registry is
// never asked. A registry's refusal reaches the Event as its host and HTTP
// status, without the registry's own message.
func TestRegistryHostsSetting(t *testing.T) {
	t.Parallel()
	reg := newRegistry(t, imgAmd64, imgPrivateNo)
	ns := newNamespace(t, nil)
	strategy := map[string]string{annotations.Strategy: seed004}
	_, port, err := net.SplitHostPort(reg.Host)
	if err != nil {
		t.Fatal(err)
	}
	before := deniedTotal(t, "loopback")

	create(t, deployment(ns, "via-localhost", "localhost:"+port+"/"+imgAmd64, 2, strategy))
	create(t, deployment(ns, "refused", reg.Ref(imgPrivateNo), 2, strategy))

	for _, app := range []string{"via-localhost", "refused"} {
		for _, p := range waitBound(t, ns, app, 2) {
			if a, ok := p.Annotations[annotations.Architectures]; ok || hasArchConstraint(&p) {
				t.Errorf("%s pod %s has architectures %q / a constraint, although its image was not read", app, p.Name, a)
			}
		}
	}

	denied := "registry host localhost:" + port + " is not allowed by settings.imageRegistries (loopback)"
	msgs := eventsFor(t, ns, "via-localhost", "ImageInspectionFailed", 30*time.Second)
	if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, denied) }) {
		t.Errorf("via-localhost: ImageInspectionFailed %q, want one saying %q; events in the namespace:%s", msgs, denied, allEvents(t, ns))
	} else {
		t.Logf("via-localhost: ImageInspectionFailed: %q", msgs)
	}
	if n := reg.Count("", framework.ManifestPath(imgAmd64)); n != 0 {
		t.Errorf("the registry was asked %d times for %s through the denied name", n, imgAmd64)
	}
	if got := deniedTotal(t, "loopback") - before; got < 1 {
		t.Errorf("apportion_image_registry_denied_total{reason=\"loopback\"} grew by %v, want at least 1", got)
	}

	// The registry answers 401 with {"errors":[{"code":"UNAUTHORIZED",
	// "message":"authentication required"}]}: the Event has the host, the
	// status and the code, not the message.
	msgs = eventsFor(t, ns, "refused", "ImageInspectionFailed", 30*time.Second)
	if len(msgs) == 0 {
		t.Errorf("no ImageInspectionFailed Event on refused; events in the namespace:%s", allEvents(t, ns))
	}
	for _, m := range msgs {
		if !strings.Contains(m, reg.Host) || !strings.Contains(m, "HTTP 401") || !strings.Contains(m, "UNAUTHORIZED") {
			t.Errorf("refused: ImageInspectionFailed %q, want the registry %s, HTTP 401 and UNAUTHORIZED", m, reg.Host)
		}
		if strings.Contains(m, "authentication required") {
			t.Errorf("refused: ImageInspectionFailed %q echoes the registry's message", m)
		}
	}
	if n := reg.Count("", framework.ManifestPath(imgPrivateNo)); n == 0 {
		t.Errorf("the registry was never asked for %s", imgPrivateNo)
	}
}

// deniedTotal sums apportion_image_registry_denied_total{reason} over the
// replicas.
func deniedTotal(t *testing.T, reason string) float64 {
	t.Helper()
	prefix := `apportion_image_registry_denied_total{reason="` + reason + `"} `
	var sum float64
	for _, r := range env.Replicas {
		text, err := r.Metrics()
		if err != nil {
			t.Fatalf("metrics of %s: %v", r.Name, err)
		}
		sc := bufio.NewScanner(strings.NewReader(text))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("metrics of %s: %q: %v", r.Name, sc.Text(), err)
				}
				sum += f
			}
		}
	}
	return sum
}
