package framework

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/apportion-dev/apportion/test/cluster"
)

// PrivatePrefix is the repository prefix for which a Registry requires HTTP
// basic authentication (Registry.Username / Registry.Password).
const PrivatePrefix = "private/"

// ownUserAgent marks the requests of the Registry's own methods, which it
// does not count.
const ownUserAgent = "apportion-e2e-registry-helper"

// ImageRegistriesArg is the `apportion webhook` flag StartReplica passes so
// that replicas read the Registries of this package: they serve on
// 127.0.0.1, which image look-ups are denied by default as loopback. The
// allow entry names the address (any port: each test serves its own
// registry), so localhost and other loopback addresses stay denied.
const ImageRegistriesArg = `--image-registries={"allow":["127.0.0.1"]}`

// RegistryMode says how a Registry answers.
type RegistryMode int32

const (
	// RegistryServing answers every request (the default).
	RegistryServing RegistryMode = iota
	// RegistryUnavailable answers every request 503 Service Unavailable.
	RegistryUnavailable
	// RegistryHanging accepts requests and never answers them, until the
	// mode changes or the client gives up.
	RegistryHanging
)

// Registry is an OCI distribution registry (go-containerregistry's
// pkg/registry, blobs in memory) served by the test process on
// 127.0.0.1:PORT inside the cluster's network namespace, where the cluster's
// components and apportion's replicas reach it. go-containerregistry talks
// plain HTTP to 127.0.0.1 registries, so it has no TLS.
//
// Around the registry it counts requests per method, path and status (not
// those of its own PushImage, PushIndex and Platforms, so the counts are the
// other clients' look-ups), requires basic auth for repositories under
// PrivatePrefix, and can stop answering (SetMode, Stop) to play an
// unavailable registry.
type Registry struct {
	// Host is "127.0.0.1:PORT", the registry part of image references.
	Host string
	// Username and Password are the credentials for PrivatePrefix.
	Username, Password string

	c        *cluster.Cluster
	registry http.Handler
	mode     atomic.Int32

	mu      sync.Mutex
	srv     *http.Server
	counts  map[string]int // "METHOD path STATUS" -> n
	changed chan struct{}  // closed and replaced on every mode change
}

// StartRegistry serves a new, empty registry on a free port inside c's
// network namespace. Close (or the cluster's end) stops it.
func StartRegistry(c *cluster.Cluster) (*Registry, error) {
	r := &Registry{
		Username: "e2e-puller", Password: "e2e-secret",
		c:        c,
		registry: registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		counts:   map[string]int{},
		changed:  make(chan struct{}),
	}
	l, err := c.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r.Host = l.Addr().String()
	r.serve(l)
	return r, nil
}

func (r *Registry) serve(l net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 10 * time.Second}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (r *Registry) handle(w http.ResponseWriter, req *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if strings.Contains(req.UserAgent(), ownUserAgent) {
			return
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		r.mu.Lock()
		r.counts[fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, status)]++
		r.mu.Unlock()
	}()
	for RegistryMode(r.mode.Load()) == RegistryHanging {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-req.Context().Done():
			sw.status = 499 // client closed the request, as nginx logs it
			return
		case <-changed:
		}
	}
	if RegistryMode(r.mode.Load()) == RegistryUnavailable {
		http.Error(sw, "registry stopped by the test", http.StatusServiceUnavailable)
		return
	}
	if strings.HasPrefix(req.URL.Path, "/v2/"+PrivatePrefix) {
		user, pass, ok := req.BasicAuth()
		if !ok || user != r.Username || pass != r.Password {
			sw.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			sw.Header().Set("Content-Type", "application/json")
			sw.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(sw, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
	}
	r.registry.ServeHTTP(sw, req)
}

// SetMode changes how the registry answers from now on; requests hanging in
// RegistryHanging are answered in the new mode.
func (r *Registry) SetMode(m RegistryMode) {
	r.mode.Store(int32(m))
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Stop closes the listener and every open connection: clients get
// "connection refused" until Restart. Any request still arriving on a
// connection being torn down is answered 503.
func (r *Registry) Stop() error {
	r.SetMode(RegistryUnavailable)
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Close()
}

// Restart listens again on the same port and serves normally, with the
// images pushed before Stop.
func (r *Registry) Restart() error {
	r.mu.Lock()
	running := r.srv != nil
	r.mu.Unlock()
	if !running {
		l, err := r.c.Listen("tcp", r.Host)
		if err != nil {
			return fmt.Errorf("registry: listening again on %s: %w", r.Host, err)
		}
		r.serve(l)
	}
	r.SetMode(RegistryServing)
	return nil
}

// Close stops the registry for good.
func (r *Registry) Close() { _ = r.Stop() }

// Ref is the image reference of repoTag ("amd64only:1") in this registry.
func (r *Registry) Ref(repoTag string) string { return r.Host + "/" + repoTag }

// Requests returns the requests served so far: "METHOD path STATUS" -> count.
func (r *Registry) Requests() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}

// ResetRequests forgets the requests counted so far.
func (r *Registry) ResetRequests() {
	r.mu.Lock()
	clear(r.counts)
	r.mu.Unlock()
}

// Count is the number of requests with method (empty: any) whose path is
// path, whatever their status.
func (r *Registry) Count(method, path string) int {
	n := 0
	for k, v := range r.Requests() {
		f := strings.Fields(k)
		if f[1] == path && (method == "" || f[0] == method) {
			n += v
		}
	}
	return n
}

// ManifestPath is the path under which the registry serves the manifest of
// repoTag ("amd64only:1" -> "/v2/amd64only/manifests/1").
func ManifestPath(repoTag string) string {
	repo, tag, _ := strings.Cut(repoTag, ":")
	return "/v2/" + repo + "/manifests/" + tag
}

// RequestSummary lists the counted requests, one "METHOD path STATUS xN" a
// line, sorted; for logs.
func (r *Registry) RequestSummary() string {
	reqs := r.Requests()
	if len(reqs) == 0 {
		return "(no requests)"
	}
	keys := make([]string, 0, len(reqs))
	for k := range reqs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s x%d\n", k, reqs[k])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// DockerConfigJSON is the .dockerconfigjson of a kubernetes.io/dockerconfigjson
// Secret holding the registry's credentials.
func (r *Registry) DockerConfigJSON() []byte {
	type entry struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Auth     string `json:"auth"`
	}
	cfg := map[string]map[string]entry{"auths": {r.Host: {
		Username: r.Username, Password: r.Password,
		Auth: base64.StdEncoding.EncodeToString([]byte(r.Username + ":" + r.Password)),
	}}}
	b, _ := json.Marshal(cfg) // maps of strings cannot fail to marshal
	return b
}

// remoteOptions reach the registry from the test process through the
// cluster's namespace, with the registry's credentials.
func (r *Registry) remoteOptions(ctx context.Context) []remote.Option {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = r.c.Dial
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(tr),
		remote.WithUserAgent(ownUserAgent),
		remote.WithAuth(&authn.Basic{Username: r.Username, Password: r.Password}),
	}
}

// ImageOptions shape the images PushImage and PushIndex build.
type ImageOptions struct {
	// Docker writes Docker (schema 2) media types instead of OCI ones.
	Docker bool
}

func (o ImageOptions) manifestType() types.MediaType {
	if o.Docker {
		return types.DockerManifestSchema2
	}
	return types.OCIManifestSchema1
}

func (o ImageOptions) configType() types.MediaType {
	if o.Docker {
		return types.DockerConfigJSON
	}
	return types.OCIConfigJSON
}

func (o ImageOptions) indexType() types.MediaType {
	if o.Docker {
		return types.DockerManifestList
	}
	return types.OCIImageIndex
}

// randomImage is a small random image whose config names platform.
func randomImage(platform v1.Platform, o ImageOptions) (v1.Image, error) {
	img, err := random.Image(256, 1)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = platform.OS, platform.Architecture, platform.Variant
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	return mutate.ConfigMediaType(mutate.MediaType(img, o.manifestType()), o.configType()), nil
}

// PushImage pushes a single-platform image manifest (no index) for platform
// ("linux/amd64", "linux/arm64/v8") as repoTag, and returns its digest.
func (r *Registry) PushImage(ctx context.Context, repoTag, platform string, o ImageOptions) (v1.Hash, error) {
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := randomImage(*p, o)
	if err != nil {
		return v1.Hash{}, err
	}
	ref, err := name.ParseReference(r.Ref(repoTag))
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Write(ref, img, r.remoteOptions(ctx)...); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	return img.Digest()
}

// PushIndex pushes an image index (OCI, or a Docker manifest list) with one
// image per platform as repoTag and returns the index digest. attestation
// adds, as BuildKit does, an attestation manifest for each image, listed
// with platform unknown/unknown: not a platform anything runs on.
func (r *Registry) PushIndex(ctx context.Context, repoTag string, platforms []string, attestation bool, o ImageOptions) (v1.Hash, error) {
	idx := mutate.IndexMediaType(empty.Index, o.indexType())
	var adds []mutate.IndexAddendum
	for _, platform := range platforms {
		p, err := v1.ParsePlatform(platform)
		if err != nil {
			return v1.Hash{}, err
		}
		img, err := randomImage(*p, o)
		if err != nil {
			return v1.Hash{}, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
		if !attestation {
			continue
		}
		digest, err := img.Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		att, err := randomImage(v1.Platform{OS: "unknown", Architecture: "unknown"}, o)
		if err != nil {
			return v1.Hash{}, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"},
			Annotations: map[string]string{
				"vnd.docker.reference.type":   "attestation-manifest",
				"vnd.docker.reference.digest": digest.String(),
			},
		}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	ref, err := name.ParseReference(r.Ref(repoTag))
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.WriteIndex(ref, idx, r.remoteOptions(ctx)...); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	return idx.Digest()
}

// Platforms reads repoTag back from the registry, as a client in the
// cluster's namespace would, and returns the platforms it lists ("os/arch",
// variant included, sorted; an index's unknown/unknown entries too).
func (r *Registry) Platforms(ctx context.Context, repoTag string) ([]string, error) {
	ref, err := name.ParseReference(r.Ref(repoTag))
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(ref, r.remoteOptions(ctx)...)
	if err != nil {
		return nil, err
	}
	var out []string
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range m.Manifests {
			if d.Platform != nil {
				out = append(out, d.Platform.String())
			}
		}
	case desc.MediaType.IsImage():
		img, err := desc.Image()
		if err != nil {
			return nil, err
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		out = append(out, cfg.Platform().String())
	default:
		return nil, errors.New("unexpected media type " + string(desc.MediaType))
	}
	slices.Sort(out)
	return out, nil
}
