package registries

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Transport returns base with p applied to every request it carries: the
// host of each request (the registry, the target of a redirect, a token
// service) by Host, and, when base is an *http.Transport without its own
// DialTLSContext, every address a connection is opened to by Addr. base is
// not modified. A refusal is a *DeniedError (wrapped in the *url.Error of
// the request).
//
// Names are resolved as fully qualified names: the pod's DNS search path
// (namespace.svc.cluster.local, ...) would make registry.tools:5000 the
// Service registry in the namespace tools, at a private address no built-in
// denial covers. A name allowed by an exact entry is resolved as written.
//
// The HTTP(S) proxy of base (HTTPS_PROXY, ...) is dialed without a check:
// the operator chose it, and it resolves the registries' names itself, so
// only their names are checked then.
func (p *Policy) Transport(base http.RoundTripper) http.RoundTripper {
	if p.open() {
		return base
	}
	g := &guard{policy: p, base: base, lookup: net.DefaultResolver.LookupNetIP,
		dialer: &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
	if t, ok := base.(*http.Transport); ok && t.DialTLSContext == nil {
		t = t.Clone()
		if proxy := t.Proxy; proxy != nil {
			t.Proxy = func(req *http.Request) (*url.URL, error) {
				u, err := proxy(req)
				if u != nil {
					g.proxies.Store(hostPort(u), struct{}{})
				}
				return u, err
			}
		}
		t.DialContext = g.dial
		g.base = t
	}
	return g
}

// guard checks requests by host and connections by address.
type guard struct {
	policy  *Policy
	base    http.RoundTripper
	dialer  *net.Dialer
	lookup  func(ctx context.Context, network, host string) ([]netip.Addr, error)
	proxies sync.Map // host:port of the proxies base used
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.URL.Hostname()
	if v := g.policy.Host(host, hostPortOf(req.URL)); !v.Allowed {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, &DeniedError{Host: host, Reason: v.Reason}
	}
	return g.base.RoundTrip(req)
}

// CloseIdleConnections closes base's idle connections (http.Client calls it).
func (g *guard) CloseIdleConnections() {
	if c, ok := g.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// dial opens a connection to addr (host:port) after checking its host, and
// each address it resolves to unless an exact entry allowed the host.
func (g *guard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, ok := g.proxies.Load(addr); ok {
		return g.dialer.DialContext(ctx, network, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	v := g.policy.Host(host, port)
	switch {
	case !v.Allowed:
		return nil, &DeniedError{Host: host, Reason: v.Reason}
	case v.Exact:
		return g.dialer.DialContext(ctx, network, addr)
	}
	addrs, err := g.resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	var denied *DeniedError
	var dialErr error
	for _, a := range addrs {
		ap, err := netip.ParseAddrPort(net.JoinHostPort(a.String(), port))
		if err != nil {
			return nil, err
		}
		if v := g.policy.Addr(ap); !v.Allowed {
			if denied == nil {
				denied = &DeniedError{Host: strings.TrimSuffix(host, "."), Addr: ap.Addr().Unmap().WithZone(""), Reason: v.Reason}
			}
			continue
		}
		// The address checked is the address dialed: a second lookup
		// cannot answer differently (DNS rebinding).
		c, err := g.dialer.DialContext(ctx, network, ap.String())
		if err == nil {
			return c, nil
		}
		dialErr = err
	}
	if dialErr != nil {
		return nil, dialErr
	}
	if denied != nil {
		return nil, denied
	}
	return nil, &net.DNSError{Err: "no address", Name: host, IsNotFound: true}
}

// resolve returns the addresses of host (an IP address is its own) of the
// network's family, the name looked up as fully qualified (see Transport).
func (g *guard) resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	family := "ip"
	switch network {
	case "tcp4":
		family = "ip4"
	case "tcp6":
		family = "ip6"
	}
	return g.lookup(ctx, family, rooted(host))
}

// rooted is host as a fully qualified name, which no search path extends.
func rooted(host string) string {
	if strings.HasSuffix(host, ".") {
		return host
	}
	return host + "."
}

// hostPort is u's host:port, the port from the scheme when u names none.
func hostPort(u *url.URL) string { return net.JoinHostPort(u.Hostname(), hostPortOf(u)) }

func hostPortOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch u.Scheme {
	case "http":
		return "80"
	case "socks5", "socks5h":
		return "1080"
	}
	return "443"
}
