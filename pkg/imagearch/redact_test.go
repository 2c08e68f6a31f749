package imagearch

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// secret is what a host that is no registry (a database console, the
// metadata service) could answer; it must never reach an error, hence an
// Event, nor a log line.
const secret = "db_password=hunter2"

// leakyServer answers /v2/ (the ping) and every other path with handle, on
// 127.0.0.1.
func leakyServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		handle(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("server on %s, want 127.0.0.1", host)
	}
	return host
}

// closedPort is a 127.0.0.1 port nothing listens on.
func closedPort(t *testing.T) string {
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

func TestRegistryAnswersAreNotEchoed(t *testing.T) {
	plain := func(status int) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(status)
			fmt.Fprint(w, secret)
		}
	}
	structured := func(status int, body string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprint(w, body)
		}
	}
	closed := closedPort(t)
	for _, c := range []struct {
		name   string
		handle func(http.ResponseWriter, *http.Request)
		want   []string // besides the host
	}{
		{"401 with a text body", plain(http.StatusUnauthorized), []string{"401"}},
		{"500 with a text body", plain(http.StatusInternalServerError), []string{"500"}},
		{"403 with the secret in the message and detail", structured(http.StatusForbidden,
			`{"errors":[{"code":"DENIED","message":"`+secret+`","detail":{"x":"`+secret+`"}}]}`), []string{"403", "DENIED"}},
		{"404 with the secret as the error code", structured(http.StatusNotFound,
			`{"errors":[{"code":"`+secret+`","message":"x"},{"code":"MANIFEST_UNKNOWN","message":"`+secret+`"}]}`), []string{"404", "MANIFEST_UNKNOWN"}},
		{"an index that is the secret", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
			fmt.Fprint(w, secret)
		}, []string{"index"}},
		{"an unknown media type", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/"+secret)
			fmt.Fprint(w, `{}`)
		}, []string{"media type"}},
		{"a redirect to a URL with the secret in its query", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("token") {
				plain(http.StatusBadGateway)(w, r)
				return
			}
			http.Redirect(w, r, "/elsewhere?token="+secret, http.StatusFound)
		}, []string{"502"}},
		{"a redirect to a closed port with the secret in its query", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://"+closed+"/x?token="+secret, http.StatusFound)
		}, []string{"connection refused"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			host := leakyServer(t, c.handle)
			ref := host + "/app:v1"
			var logs safeLines
			ctx := log.IntoContext(t.Context(), funcr.New(logs.add, funcr.Options{Verbosity: 10}))
			in := newTestInspector(nil, Options{BreakerFailures: 1})
			pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: ref}}}}
			// Twice: fetched, then from the negative cache.
			for range 2 {
				_, err := in.Pod(ctx, pod)
				if err == nil {
					t.Fatal("want an error")
				}
				msg := err.Error()
				if strings.Contains(msg, "hunter2") || strings.Contains(msg, "token") {
					t.Errorf("error %q echoes the server's answer", msg)
				}
				for _, want := range append([]string{ref, host}, c.want...) {
					if !strings.Contains(msg, want) {
						t.Errorf("error %q lacks %q", msg, want)
					}
				}
			}
			for _, l := range logs.all() {
				if strings.Contains(l, "hunter2") {
					t.Errorf("log line echoes the server's answer: %s", l)
				}
			}
		})
	}
}
