package registries

import (
	"net/netip"
	"strings"
	"testing"
)

func mustParse(t *testing.T, raw string) *Policy {
	t.Helper()
	p, err := Parse(raw)
	if err != nil {
		t.Fatalf("Parse(%s): %v", raw, err)
	}
	return p
}

func TestDefaultHosts(t *testing.T) {
	p := Default()
	for _, c := range []struct {
		host, port string
		want       Reason // "": allowed
	}{
		// Registries, public and private (ECR through a VPC endpoint
		// resolves to private addresses; a literal private address too).
		{"index.docker.io", "443", ""},
		{"123456789012.dkr.ecr.us-east-1.amazonaws.com", "443", ""},
		{"public.ecr.aws", "443", ""},
		{"registry.example.com", "5000", ""},
		{"10.0.12.7", "5000", ""},
		{"172.16.0.1", "443", ""},
		{"192.168.1.10", "443", ""},
		{"fd12:3456::1", "443", ""},
		{"8.8.8.8", "443", ""},
		// Loopback.
		{"localhost", "5000", ReasonLoopback},
		{"LocalHost.", "5000", ReasonLoopback},
		{"app.localhost", "443", ReasonLoopback},
		{"127.0.0.1", "5000", ReasonLoopback},
		{"127.1.2.3", "443", ReasonLoopback},
		{"::1", "443", ReasonLoopback},
		{"[::1]", "443", ReasonLoopback},
		{"::ffff:127.0.0.1", "443", ReasonLoopback},
		{"0.0.0.0", "80", ReasonLoopback},
		{"::", "80", ReasonLoopback},
		// Link-local, the metadata service among them.
		{"169.254.169.254", "80", ReasonLinkLocal},
		{"169.254.170.23", "80", ReasonLinkLocal},
		{"::ffff:169.254.169.254", "80", ReasonLinkLocal},
		{"fe80::1", "443", ReasonLinkLocal},
		{"fe80::1%eth0", "443", ReasonLinkLocal},
		{"fd00:ec2::254", "80", ReasonLinkLocal},
		{"fd00:ec2::23", "80", ReasonLinkLocal},
		// The other clouds' metadata services.
		{"100.100.100.200", "80", ReasonMetadata},
		{"::ffff:100.100.100.200", "80", ReasonMetadata},
		{"192.0.0.192", "80", ReasonMetadata},
		{"168.63.129.16", "80", ReasonMetadata},
		{"fd20:ce::254", "80", ReasonMetadata},
		{"metadata.google.internal", "80", ReasonMetadata},
		{"Metadata.Google.Internal.", "80", ReasonMetadata},
		{"metadata.goog", "80", ReasonMetadata},
		{"metadata.tencentyun.com", "80", ReasonMetadata},
		{"instance-data.ec2.internal", "80", ReasonMetadata},
		{"metadata", "80", ReasonClusterName},
		{"instance-data", "80", ReasonClusterName},
		// Their neighbours are not.
		{"100.100.100.201", "443", ""},
		{"registry.metadata.google.internal.example", "443", ""},
		// In-cluster names.
		{"registry", "5000", ReasonClusterName},
		{"registry.tools.svc", "5000", ReasonClusterName},
		{"registry.tools.svc.cluster.local", "5000", ReasonClusterName},
		{"registry.tools.svc.cluster.local.", "5000", ReasonClusterName},
		{"kubernetes.default.svc.cluster.local", "443", ReasonClusterName},
	} {
		v := p.Host(c.host, c.port)
		if got := reasonOf(v); got != c.want {
			t.Errorf("Host(%q, %q) = %+v, want %q", c.host, c.port, v, c.want)
		}
		if v.Exact {
			t.Errorf("Host(%q, %q) is exact without an allow entry", c.host, c.port)
		}
	}
}

func reasonOf(v Verdict) Reason {
	if v.Allowed {
		return ""
	}
	return v.Reason
}

func TestEntriesAndPrecedence(t *testing.T) {
	p := mustParse(t, `{
		"allow": ["127.0.0.1:5000", "registry.tools.svc.cluster.local", "*.allowed.example", "10.1.0.0/16", "[::1]:5001", "localhost:5002"],
		"deny":  ["*.corp.example", "bad.example:443", "10.0.0.0/8", "203.0.113.7"]
	}`)
	for _, c := range []struct {
		host, port string
		want       Reason
		exact      bool
	}{
		// An allow entry wins over the built-in denials...
		{"127.0.0.1", "5000", "", true},
		{"::1", "5001", "", true},
		{"localhost", "5002", "", true},
		{"registry.tools.svc.cluster.local", "5000", "", true},
		// ... only for what it names: another port stays denied.
		{"127.0.0.1", "5001", ReasonLoopback, false},
		{"localhost", "5000", ReasonLoopback, false},
		{"::1", "5000", ReasonLoopback, false},
		{"other.tools.svc.cluster.local", "5000", ReasonClusterName, false},
		// A wildcard allows the names under it, not itself, and is not exact.
		{"r.allowed.example", "443", "", false},
		{"a.b.allowed.example", "443", "", false},
		{"allowed.example", "443", "", false},
		// An allow entry wins over a deny entry.
		{"10.1.2.3", "443", "", true},
		{"10.2.0.1", "443", ReasonDenyEntry, false},
		// Deny entries.
		{"r.corp.example", "5000", ReasonDenyEntry, false},
		{"corp.example", "5000", "", false},
		{"bad.example", "443", ReasonDenyEntry, false},
		{"bad.example", "5000", "", false},
		{"203.0.113.7", "443", ReasonDenyEntry, false},
		{"203.0.113.8", "443", "", false},
	} {
		v := p.Host(c.host, c.port)
		if got := reasonOf(v); got != c.want || v.Exact != c.exact {
			t.Errorf("Host(%q, %q) = %+v, want reason %q exact %v", c.host, c.port, v, c.want, c.exact)
		}
	}

	// Resolved addresses: address entries and built-in ranges only.
	for _, c := range []struct {
		addr string
		want Reason
	}{
		{"127.0.0.1:5000", ""},
		{"127.0.0.1:443", ReasonLoopback},
		{"[::1]:5001", ""},
		{"169.254.169.254:80", ReasonLinkLocal},
		{"[::ffff:169.254.169.254]:80", ReasonLinkLocal},
		{"100.100.100.200:80", ReasonMetadata},
		{"[fd20:ce::254]:80", ReasonMetadata},
		{"10.1.0.9:443", ""},
		{"10.9.0.9:443", ReasonDenyEntry},
		{"203.0.113.7:443", ReasonDenyEntry},
		{"192.168.0.1:443", ""},
		{"52.94.1.1:443", ""},
	} {
		if got := reasonOf(p.Addr(netip.MustParseAddrPort(c.addr))); got != c.want {
			t.Errorf("Addr(%s) = %q, want %q", c.addr, got, c.want)
		}
	}
}

// "*" in deny refuses every name not allowed: an allow list.
func TestDenyAll(t *testing.T) {
	p := mustParse(t, `{"allow":["*.dkr.ecr.us-east-1.amazonaws.com","public.ecr.aws"],"deny":["*"]}`)
	for host, want := range map[string]Reason{
		"123456789012.dkr.ecr.us-east-1.amazonaws.com": "",
		"public.ecr.aws":  "",
		"index.docker.io": ReasonDenyEntry,
		"10.0.0.1":        ReasonDenyEntry,
	} {
		if got := reasonOf(p.Host(host, "443")); got != want {
			t.Errorf("Host(%q) = %q, want %q", host, got, want)
		}
	}
	// Addresses are not names: "*" leaves them to the built-in ranges.
	if got := reasonOf(p.Addr(netip.MustParseAddrPort("52.94.1.1:443"))); got != "" {
		t.Errorf("Addr(52.94.1.1) = %q, want allowed", got)
	}
	if got := reasonOf(p.Addr(netip.MustParseAddrPort("169.254.169.254:80"))); got != ReasonLinkLocal {
		t.Errorf("Addr(169.254.169.254) = %q, want link_local", got)
	}
}

func TestOpen(t *testing.T) {
	p := Open()
	for _, host := range []string{"localhost", "127.0.0.1", "169.254.169.254", "registry", "r.svc.cluster.local"} {
		if v := p.Host(host, "80"); !v.Allowed {
			t.Errorf("Open().Host(%q) = %+v", host, v)
		}
	}
	if !p.open() || Default().open() || mustParse(t, `{"allow":["x.example"]}`).open() {
		t.Error("open(): want true for Open only")
	}
}

func TestParse(t *testing.T) {
	for _, raw := range []string{"", "  ", `{}`, `{"allow":[],"deny":[]}`} {
		p := mustParse(t, raw)
		if v := p.Host("127.0.0.1", "5000"); v.Allowed {
			t.Errorf("Parse(%q) allows loopback: the built-in denials must stay", raw)
		}
	}
	for _, c := range []struct{ raw, want string }{
		{`["127.0.0.1"]`, "want {"},
		{`{"allowed":["127.0.0.1"]}`, "unknown field"},
		{`{"allow":[""]}`, "empty"},
		{`{"allow":["https://registry.example.com"]}`, "not a URL"},
		{`{"allow":["registry.example.com/path"]}`, "not a CIDR range"},
		{`{"allow":["10.0.0.0/33"]}`, "not a CIDR range"},
		{`{"deny":["registry.example.com:0"]}`, "port must be"},
		{`{"deny":["registry.example.com:http"]}`, "port must be"},
		{`{"deny":["a:b:c"]}`, "want host"},
		{`{"deny":["*.-bad.example"]}`, "wildcard"},
		{`{"deny":["bad host"]}`, "not a host name"},
		{`{"deny":["*example.com"]}`, "not a host name"},
	} {
		_, err := Parse(c.raw)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want an error with %q", c.raw, err, c.want)
		}
	}
	// Every bad entry is reported at once.
	_, err := Parse(`{"allow":["", "ok.example"],"deny":["a:b:c"]}`)
	if err == nil || !strings.Contains(err.Error(), `allow entry ""`) || !strings.Contains(err.Error(), `deny entry "a:b:c"`) {
		t.Errorf("two bad entries: %v", err)
	}
}

func TestDeniedErrorText(t *testing.T) {
	e := &DeniedError{Host: "169.254.169.254", Reason: ReasonLinkLocal}
	if got := e.Error(); !strings.Contains(got, "169.254.169.254") || !strings.Contains(got, "settings.imageRegistries") || !strings.Contains(got, "metadata") {
		t.Errorf("Error() = %q", got)
	}
	e = &DeniedError{Host: "meta.example", Addr: netip.MustParseAddr("169.254.169.254"), Reason: ReasonLinkLocal}
	if got := e.Error(); !strings.Contains(got, "meta.example resolves to 169.254.169.254") {
		t.Errorf("Error() = %q", got)
	}
}

func FuzzHost(f *testing.F) {
	for _, s := range []string{"localhost", "127.0.0.1", "[::1]", "registry.example.com", "fe80::1%eth0", "a..b", "*.x", ""} {
		f.Add(s, "443")
	}
	p := mustParseF(f, `{"allow":["127.0.0.1:5000","*.ok.example"],"deny":["*.corp.example","10.0.0.0/8"]}`)
	f.Fuzz(func(t *testing.T, host, port string) {
		v := p.Host(host, port)
		if v.Exact && !v.Allowed {
			t.Fatalf("Host(%q, %q) = %+v: exact but denied", host, port, v)
		}
		// A loopback or link-local literal is never allowed without the
		// allow entry's port.
		h, a, isIP := normalize(host)
		if isIP && port != "5000" {
			if _, builtin := builtinAddr(a); builtin && v.Allowed {
				t.Fatalf("Host(%q (%s), %q) allowed a built-in denied address", host, h, port)
			}
		}
	})
}

func mustParseF(f *testing.F, raw string) *Policy {
	p, err := Parse(raw)
	if err != nil {
		f.Fatal(err)
	}
	return p
}
