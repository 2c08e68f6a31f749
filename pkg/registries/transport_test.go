package registries

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// testServer is an HTTP server on 127.0.0.1 counting its requests; paths
// /to/<url> redirect to <url>.
type testServer struct {
	host, port string
	hits       atomic.Int64
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	s := &testServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		if to, ok := strings.CutPrefix(r.URL.Path, "/to/"); ok {
			http.Redirect(w, r, "http://"+to, http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	s.host, s.port = u.Hostname(), u.Port()
	if s.host != "127.0.0.1" {
		t.Fatalf("test server on %s, want 127.0.0.1", s.host)
	}
	return s
}

// fakeDNS answers lookups from a table and records the names asked.
type fakeDNS struct {
	mu    sync.Mutex
	table map[string][]string
	asked []string
}

func (d *fakeDNS) lookup(_ context.Context, _, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, host)
	var out []netip.Addr
	for _, a := range d.table[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

func (d *fakeDNS) names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.asked)
}

// client is an HTTP client through p's Transport over a plain
// http.Transport (no proxy from the environment), resolving with dns.
func client(t *testing.T, p *Policy, dns *fakeDNS, base *http.Transport) *http.Client {
	t.Helper()
	if base == nil {
		base = &http.Transport{}
	}
	rt := p.Transport(base)
	g, ok := rt.(*guard)
	if !ok {
		t.Fatalf("Transport returned %T", rt)
	}
	if dns != nil {
		g.lookup = dns.lookup
	}
	t.Cleanup(g.CloseIdleConnections)
	return &http.Client{Transport: rt}
}

func get(c *http.Client, u string) error {
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}

func wantDenied(t *testing.T, err error, host string, addr string, reason Reason) {
	t.Helper()
	d := (*DeniedError)(nil)
	if !errors.As(err, &d) {
		t.Fatalf("error = %v, want a DeniedError", err)
	}
	wantAddr := netip.Addr{}
	if addr != "" {
		wantAddr = netip.MustParseAddr(addr)
	}
	if d.Host != host || d.Addr != wantAddr || d.Reason != reason {
		t.Errorf("denied %+v, want host %s, address %s, reason %s", d, host, addr, reason)
	}
}

func TestTransportDeniesByDefault(t *testing.T) {
	srv := newTestServer(t)
	dns := &fakeDNS{table: map[string][]string{
		"public.example.": {"127.0.0.1"},
		"meta.example.":   {"169.254.169.254"},
		"meta6.example.":  {"fd00:ec2::254"},
	}}
	c := client(t, Default(), dns, nil)

	wantDenied(t, get(c, "http://127.0.0.1:"+srv.port+"/"), "127.0.0.1", "", ReasonLoopback)
	wantDenied(t, get(c, "http://localhost:"+srv.port+"/"), "localhost", "", ReasonLoopback)
	wantDenied(t, get(c, "http://registry:"+srv.port+"/"), "registry", "", ReasonClusterName)
	wantDenied(t, get(c, "http://169.254.169.254/latest/meta-data/"), "169.254.169.254", "", ReasonLinkLocal)
	// Public names resolving to denied addresses: refused before any
	// connection is opened.
	wantDenied(t, get(c, "http://public.example:"+srv.port+"/"), "public.example", "127.0.0.1", ReasonLoopback)
	wantDenied(t, get(c, "http://meta.example/latest/meta-data/"), "meta.example", "169.254.169.254", ReasonLinkLocal)
	wantDenied(t, get(c, "http://meta6.example/latest/meta-data/"), "meta6.example", "fd00:ec2::254", ReasonLinkLocal)
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("the server got %d requests, want none", n)
	}
}

func TestTransportAllowEntries(t *testing.T) {
	srv := newTestServer(t)
	dns := &fakeDNS{table: map[string][]string{
		"registry.tools.": {"127.0.0.1"},
		"mixed.example.":  {"169.254.169.254", "127.0.0.1"},
		"meta.example.":   {"169.254.169.254"},
	}}
	p := mustParse(t, `{"allow":["127.0.0.1:`+srv.port+`","localhost:`+srv.port+`"]}`)
	c := client(t, p, dns, nil)

	// The allowed address and port.
	if err := get(c, "http://127.0.0.1:"+srv.port+"/"); err != nil {
		t.Fatal(err)
	}
	// A name resolving to it, looked up as a fully qualified name (no
	// search path), and one whose denied address is skipped.
	for _, name := range []string{"registry.tools", "mixed.example"} {
		if err := get(c, "http://"+name+":"+srv.port+"/"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if got := dns.names(); !slices.Equal(got, []string{"registry.tools.", "mixed.example."}) {
		t.Errorf("names looked up: %q, want the fully qualified registry.tools. and mixed.example.", got)
	}
	// An exact name is resolved as written, by the system's resolver.
	if err := get(c, "http://localhost:"+srv.port+"/"); err != nil {
		t.Fatalf("localhost allowed by an exact entry: %v", err)
	}
	if n := srv.hits.Load(); n != 4 {
		t.Errorf("the server got %d requests, want 4", n)
	}
	if len(dns.names()) != 2 {
		t.Errorf("the exact name localhost went through the checked lookup: %q", dns.names())
	}

	// Another port of the allowed address is still loopback.
	wantDenied(t, get(c, "http://127.0.0.1:1/"), "127.0.0.1", "", ReasonLoopback)

	// Redirects from the allowed registry are checked like any request.
	srv.hits.Store(0)
	wantDenied(t, get(c, "http://127.0.0.1:"+srv.port+"/to/meta.example/latest/meta-data/"), "meta.example", "169.254.169.254", ReasonLinkLocal)
	wantDenied(t, get(c, "http://127.0.0.1:"+srv.port+"/to/169.254.169.254/latest/meta-data/"), "169.254.169.254", "", ReasonLinkLocal)
	wantDenied(t, get(c, "http://127.0.0.1:"+srv.port+"/to/127.0.0.1:1/"), "127.0.0.1", "", ReasonLoopback)
	wantDenied(t, get(c, "http://127.0.0.1:"+srv.port+"/to/kube-dns.kube-system.svc.cluster.local:53/"), "kube-dns.kube-system.svc.cluster.local", "", ReasonClusterName)
	if n := srv.hits.Load(); n != 4 {
		t.Errorf("the server got %d requests, want 4 (the redirects only)", n)
	}
}

func TestTransportDenyEntries(t *testing.T) {
	srv := newTestServer(t)
	dns := &fakeDNS{table: map[string][]string{"internal.example.": {"127.0.0.1"}}}
	// 127.0.0.0/8 allowed as addresses, but the name and a range denied.
	p := mustParse(t, `{"allow":["127.0.0.0/8"],"deny":["*.example","10.0.0.0/8"]}`)
	c := client(t, p, dns, nil)
	wantDenied(t, get(c, "http://internal.example:"+srv.port+"/"), "internal.example", "", ReasonDenyEntry)
	wantDenied(t, get(c, "http://10.1.2.3/"), "10.1.2.3", "", ReasonDenyEntry)
	if err := get(c, "http://127.0.0.1:"+srv.port+"/"); err != nil {
		t.Fatal(err)
	}
	if n := srv.hits.Load(); n != 1 {
		t.Errorf("the server got %d requests, want 1", n)
	}
}

// A proxy the operator configured is dialed even on a denied address; the
// names it is asked for are still checked.
func TestTransportProxy(t *testing.T) {
	proxy := newTestServer(t)
	proxyURL := &url.URL{Scheme: "http", Host: "127.0.0.1:" + proxy.port}
	base := &http.Transport{Proxy: func(*http.Request) (*url.URL, error) { return proxyURL, nil }}
	c := client(t, Default(), &fakeDNS{}, base)
	if err := get(c, "http://registry.example.com/v2/"); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	wantDenied(t, get(c, "http://169.254.169.254/latest/meta-data/"), "169.254.169.254", "", ReasonLinkLocal)
	wantDenied(t, get(c, "http://registry.tools.svc.cluster.local/"), "registry.tools.svc.cluster.local", "", ReasonClusterName)
	if n := proxy.hits.Load(); n != 1 {
		t.Errorf("the proxy got %d requests, want 1", n)
	}
}

func TestOpenTransportIsBase(t *testing.T) {
	base := &http.Transport{}
	if rt := Open().Transport(base); rt != base {
		t.Errorf("Open().Transport = %T, want base itself", rt)
	}
}
