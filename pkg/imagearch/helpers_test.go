package imagearch

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/client-go/kubernetes"

	"github.com/apportion-dev/apportion/pkg/registries"
)

// testRegistry is go-containerregistry's in-memory registry on 127.0.0.1,
// counting the requests it serves by kind, with switches to fail, block or
// require basic auth.
type testRegistry struct {
	t    *testing.T
	srv  *httptest.Server
	host string

	pings, manifestGets, manifestHeads, blobGets atomic.Int64
	refused                                      atomic.Int64 // requests without the credentials

	status atomic.Int64 // when non-zero, every read answers this status
	// blobsTo, when set, redirects every blob GET to this URL.
	blobsTo atomic.Pointer[string]
	user    string // when set, basic auth user:pass is required
	pass    string
	mu      sync.Mutex
	blocked chan struct{} // when non-nil, manifest GETs wait for it to close
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	return startTestRegistry(t, false)
}

// newTLSTestRegistry is newTestRegistry over HTTPS, with httptest's
// certificate: a reference naming a registry by a public host (an ECR one,
// see reachedAs) is read over HTTPS only.
func newTLSTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	return startTestRegistry(t, true)
}

func startTestRegistry(t *testing.T, tls bool) *testRegistry {
	t.Helper()
	r := &testRegistry{t: t}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.user || p != r.pass {
				r.refused.Add(1)
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		read := req.Method == http.MethodGet || req.Method == http.MethodHead
		switch {
		case req.URL.Path == "/v2/" || req.URL.Path == "/v2":
			r.pings.Add(1)
		case strings.Contains(req.URL.Path, "/manifests/") && req.Method == http.MethodGet:
			r.manifestGets.Add(1)
			r.mu.Lock()
			b := r.blocked
			r.mu.Unlock()
			if b != nil {
				<-b
			}
		case strings.Contains(req.URL.Path, "/manifests/") && req.Method == http.MethodHead:
			r.manifestHeads.Add(1)
		case strings.Contains(req.URL.Path, "/blobs/") && req.Method == http.MethodGet:
			r.blobGets.Add(1)
		}
		if to := r.blobsTo.Load(); to != nil && strings.Contains(req.URL.Path, "/blobs/") {
			http.Redirect(w, req, *to, http.StatusTemporaryRedirect)
			return
		}
		if s := r.status.Load(); s != 0 && read {
			http.Error(w, "failing on purpose", int(s))
			return
		}
		inner.ServeHTTP(w, req)
	}))
	if tls {
		r.srv.StartTLS()
	} else {
		r.srv.Start()
	}
	t.Cleanup(r.srv.Close)
	r.host = r.srv.Listener.Addr().String()
	if !strings.HasPrefix(r.host, "127.0.0.1:") {
		t.Fatalf("test registry listens on %s, want 127.0.0.1", r.host)
	}
	return r
}

// resetCounts forgets the requests of the set-up (pushes).
func (r *testRegistry) resetCounts() {
	r.pings.Store(0)
	r.manifestGets.Store(0)
	r.manifestHeads.Store(0)
	r.blobGets.Store(0)
	r.refused.Store(0)
}

func (r *testRegistry) block() chan struct{} {
	ch := make(chan struct{})
	r.mu.Lock()
	r.blocked = ch
	r.mu.Unlock()
	return ch
}

func (r *testRegistry) ref(repoTag string) string { return r.host + "/" + repoTag }

func (r *testRegistry) pushOpts() []remote.Option {
	var opts []remote.Option
	if r.user != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: r.user, Password: r.pass}))
	}
	if r.srv.TLS != nil {
		opts = append(opts, remote.WithTransport(r.srv.Client().Transport))
	}
	return opts
}

// reachedAs is a transport that reaches the TLS registry r whatever host a
// request names (the registry serves its images under any host), trusting
// httptest's certificate. It is no *http.Transport, so the Registries policy
// checks the hosts of its requests only, not the address it dials.
func (r *testRegistry) reachedAs() http.RoundTripper {
	t := r.srv.Client().Transport.(*http.Transport).Clone()
	t.TLSClientConfig.ServerName = "example.com" // a name httptest's certificate holds
	addr := r.srv.Listener.Addr().String()
	t.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return roundTripFunc(t.RoundTrip)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// image is a random single-platform image whose config names p.
func image(t *testing.T, p Platform) v1.Image {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// pushImage pushes a single-platform image and returns its reference.
func (r *testRegistry) pushImage(repoTag string, p Platform) string {
	r.t.Helper()
	ref := r.ref(repoTag)
	if err := remote.Write(mustRef(r.t, ref), image(r.t, p), r.pushOpts()...); err != nil {
		r.t.Fatal(err)
	}
	return ref
}

// entryOf is one manifest of a test index.
type entryOf struct {
	platform    *v1.Platform
	annotations map[string]string
}

func plat(os, arch, variant string) *v1.Platform {
	return &v1.Platform{OS: os, Architecture: arch, Variant: variant}
}

// attestation is an entry as BuildKit writes its provenance.
var attestation = entryOf{
	platform:    plat("unknown", "unknown", ""),
	annotations: map[string]string{"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": "sha256:0000"},
}

// pushIndex pushes an index (OCI, or a Docker manifest list with docker)
// whose entries carry the given platforms and annotations.
func (r *testRegistry) pushIndex(repoTag string, docker bool, entries ...entryOf) (string, v1.Hash) {
	r.t.Helper()
	var idx v1.ImageIndex = empty.Index
	if docker {
		idx = mutate.IndexMediaType(idx, types.DockerManifestList)
	}
	for _, e := range entries {
		p := Platform{OS: "linux", Architecture: "amd64"}
		if e.platform != nil {
			p = Platform{OS: e.platform.OS, Architecture: e.platform.Architecture, Variant: e.platform.Variant}
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        image(r.t, p),
			Descriptor: v1.Descriptor{Platform: e.platform, Annotations: e.annotations},
		})
	}
	ref := r.ref(repoTag)
	if err := remote.WriteIndex(mustRef(r.t, ref), idx, r.pushOpts()...); err != nil {
		r.t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		r.t.Fatal(err)
	}
	return ref, d
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func platformStrings(ps []Platform) []string {
	out := make([]string, len(ps))
	for k, p := range ps {
		out[k] = p.String()
	}
	return out
}

// newTestInspector is New allowing the tests' registries on 127.0.0.1,
// which the default Registries policy denies as loopback, unless opts names
// a policy.
func newTestInspector(kube kubernetes.Interface, opts Options) *Inspector {
	if opts.Registries == nil {
		p, err := registries.Parse(`{"allow":["127.0.0.1"]}`)
		if err != nil {
			panic(err)
		}
		opts.Registries = p
	}
	return New(kube, opts)
}
