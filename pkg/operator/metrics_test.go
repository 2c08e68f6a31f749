package operator

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jellydator/ttlcache/v3"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/apportion-dev/apportion/pkg/options"
)

// reviews counts the reviews a fake API server answered.
type reviews struct{ tokens, access atomic.Int32 }

// fakeReviewer answers the API server's TokenReview and
// SubjectAccessReview as a cluster would: the token "prometheus-token"
// belongs to the user prometheus, who may get /metrics; "other-token" to a
// user who may not. Every other token is not authenticated.
func fakeReviewer(t *testing.T) *httptest.Server {
	srv, _ := countingReviewer(t)
	return srv
}

// countingReviewer is fakeReviewer, and counts the reviews it answers.
func countingReviewer(t *testing.T) (*httptest.Server, *reviews) {
	t.Helper()
	n := &reviews{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			n.tokens.Add(1)
			var review authenticationv1.TokenReview
			if err := decodeReview(r, &review); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			switch review.Spec.Token {
			case "prometheus-token":
				review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "prometheus"}}
			case "other-token":
				review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "other"}}
			}
			_ = json.NewEncoder(w).Encode(&review)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			n.access.Add(1)
			var review authorizationv1.SubjectAccessReview
			if err := decodeReview(r, &review); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			na := review.Spec.NonResourceAttributes
			review.Status.Allowed = review.Spec.User == "prometheus" && na != nil && na.Path == "/metrics" && na.Verb == "get"
			_ = json.NewEncoder(w).Encode(&review)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, n
}

// decodeReview reads a review as the API server does, in the wire format
// the client chose (client-go sends built-in types as protobuf).
func decodeReview(r *http.Request, into runtime.Object) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	_, _, err = scheme.Codecs.UniversalDeserializer().Decode(body, nil, into)
	return err
}

// freeAddress is a loopback address with a port nothing listens on now.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// startMetrics runs the metrics server built from o against the fake API
// server until the test ends.
func startMetrics(t *testing.T, o *options.Options, api *httptest.Server) {
	t.Helper()
	cfg := &rest.Config{Host: api.URL}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := metricsserver.NewServer(metricsOptions(o), cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metrics server: %v", err)
		}
	})
}

// scrape gets /metrics with token (none when empty), retrying while the
// server is not listening yet.
func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{
		// The certificate is self-signed at start.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a test against the self-signed certificate
	}}
	defer client.CloseIdleConnections()
	var lastErr error
	for range 100 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			var opErr *net.OpError
			if errors.As(err, &opErr) && opErr.Op == "dial" {
				lastErr = err
				time.Sleep(50 * time.Millisecond)
				continue
			}
			t.Fatalf("GET %s: %v", url, err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	t.Fatalf("GET %s: the metrics server never listened: %v", url, lastErr)
	return 0, ""
}

// TestSecureMetricsRefuseUnauthenticatedScrapes: with --metrics-secure,
// /metrics answers over HTTPS only to a caller whose token the API server
// accepts and who may get /metrics; anyone else gets nothing.
func TestSecureMetricsRefuseUnauthenticatedScrapes(t *testing.T) {
	addr := freeAddress(t)
	startMetrics(t, &options.Options{MetricsBindAddress: addr, MetricsSecure: true}, fakeReviewer(t))
	url := "https://" + addr + "/metrics"
	for _, c := range []struct {
		name  string
		token string
		want  int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the API server rejects", "forged-token", http.StatusUnauthorized},
		{"a user without get on /metrics", "other-token", http.StatusForbidden},
		{"a user with get on /metrics", "prometheus-token", http.StatusOK},
	} {
		code, body := scrape(t, url, c.token)
		if code != c.want {
			t.Errorf("%s: status %d, want %d: %s", c.name, code, c.want, body)
		}
		if leaked := strings.Contains(body, "# TYPE"); leaked != (c.want == http.StatusOK) {
			t.Errorf("%s: status %d, metrics in the body: %t", c.name, code, leaked)
		}
	}
}

// TestPlainMetricsByDefault: without --metrics-secure, /metrics is plain
// HTTP and asks nobody (today's behaviour, which the chart keeps by default).
func TestPlainMetricsByDefault(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("plain metrics called the API server: %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
	}))
	t.Cleanup(api.Close)
	addr := freeAddress(t)
	startMetrics(t, &options.Options{MetricsBindAddress: addr}, api)
	code, body := scrape(t, "http://"+addr+"/metrics", "")
	if code != http.StatusOK || !strings.Contains(body, "# TYPE") {
		t.Errorf("plain scrape: status %d, body %.200q; want 200 with metrics", code, body)
	}
}

// TestSecureMetricsCacheTheReviews: a Prometheus scraping every few seconds
// costs the API server one TokenReview a minute and one SubjectAccessReview
// every few minutes, and a rejected token is not reviewed again at once
// either.
func TestSecureMetricsCacheTheReviews(t *testing.T) {
	addr := freeAddress(t)
	api, n := countingReviewer(t)
	startMetrics(t, &options.Options{MetricsBindAddress: addr, MetricsSecure: true}, api)
	url := "https://" + addr + "/metrics"
	for range 3 {
		if code, body := scrape(t, url, "prometheus-token"); code != http.StatusOK {
			t.Fatalf("scrape: status %d: %.200s", code, body)
		}
	}
	for range 2 {
		if code, body := scrape(t, url, "forged-token"); code != http.StatusUnauthorized {
			t.Fatalf("scrape with a forged token: status %d: %.200s", code, body)
		}
	}
	if got := n.tokens.Load(); got != 2 {
		t.Errorf("TokenReviews: %d, want 2 (one per token)", got)
	}
	if got := n.access.Load(); got != 1 {
		t.Errorf("SubjectAccessReviews: %d, want 1 (the forged token is not authorized)", got)
	}
}

// TestSecureMetricsWhenTheAPIServerFails: a review that fails answers 500,
// without metrics, and is not cached: the next scrape asks again.
func TestSecureMetricsWhenTheAPIServerFails(t *testing.T) {
	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		http.Error(w, "etcd is down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(api.Close)
	addr := freeAddress(t)
	startMetrics(t, &options.Options{MetricsBindAddress: addr, MetricsSecure: true}, api)
	for range 2 {
		code, body := scrape(t, "https://"+addr+"/metrics", "prometheus-token")
		if code != http.StatusInternalServerError || strings.Contains(body, "# TYPE") {
			t.Errorf("status %d, body %.200q; want 500 without metrics", code, body)
		}
	}
	if calls.Load() < 2 {
		t.Errorf("the API server was asked %d time(s) for two scrapes: a failure was cached", calls.Load())
	}
}

// TestMetricsAuthReadsOnlyBearerTokens: anything but "Bearer TOKEN" is no
// credential, and is not sent to the API server.
func TestMetricsAuthReadsOnlyBearerTokens(t *testing.T) {
	api, n := countingReviewer(t)
	cfg := &rest.Config{Host: api.URL}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := metricsFilter(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "# TYPE x counter\n")
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		header string
		want   int
	}{
		{"", http.StatusUnauthorized},
		{"Basic cHJvbWV0aGV1czpwdw==", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Bearer prometheus-token extra", http.StatusUnauthorized},
		{"bearer prometheus-token", http.StatusOK},
		{"Bearer other-token", http.StatusForbidden},
	} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("Authorization %q: status %d, want %d", c.header, rec.Code, c.want)
		}
	}
	if got := n.tokens.Load(); got != 2 {
		t.Errorf("TokenReviews: %d, want 2 (prometheus-token, other-token)", got)
	}
}

// TestMetricsAuthCachesAreBounded: callers sending new tokens cannot grow
// the caches past metricsAuthCacheSize.
func TestMetricsAuthCachesAreBounded(t *testing.T) {
	a := newMetricsAuth(nil, nil)
	for i := range 3 * metricsAuthCacheSize {
		a.users.Set(strconv.Itoa(i), nil, ttlcache.DefaultTTL)
		a.decisions.Set(strconv.Itoa(i), false, metricsDenyTTL)
	}
	if a.users.Len() > metricsAuthCacheSize || a.decisions.Len() > metricsAuthCacheSize {
		t.Errorf("cache sizes %d and %d, want at most %d", a.users.Len(), a.decisions.Len(), metricsAuthCacheSize)
	}
}
