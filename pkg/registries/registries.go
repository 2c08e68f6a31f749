// Package registries decides which hosts apportion may connect to when it
// reads image platforms. An image reference is a tenant's text: without a
// check it would make apportion fetch any host its network reaches, the
// instance metadata service and in-cluster Services included.
//
// A Policy holds the allow and deny entries of settings.imageRegistries
// (--image-registries) over built-in denials. An entry is one of
//
//	registry.example.com        a host name, any port
//	registry.example.com:5000   a host name and port
//	*.example.com               any name under example.com (not example.com itself), optionally :port
//	127.0.0.1, [::1]:5000       an IP address, optionally with a port
//	10.0.0.0/8, fd00::/8        a CIDR range of addresses, any port
//	*                           every name
//
// A host is decided by the first that applies:
//
//  1. an allow entry matches: allowed;
//  2. a deny entry matches: denied;
//  3. a built-in denial matches: denied (loopback: localhost, *.localhost,
//     127.0.0.0/8, ::1, 0.0.0.0/8, ::; link-local: 169.254.0.0/16 with the
//     EC2 instance metadata service 169.254.169.254, fe80::/10,
//     fd00:ec2::/64 with its IPv6 address fd00:ec2::254; the other clouds'
//     metadata services outside link-local: Alibaba Cloud's 100.100.100.200,
//     Oracle Cloud's 192.0.0.192, Azure's WireServer 168.63.129.16, Google
//     Cloud's fd20:ce::254 and the names metadata.google.internal,
//     metadata.goog, metadata.tencentyun.com and instance-data.ec2.internal;
//     in-cluster names: *.svc, *.cluster.local and names without a dot,
//     which the cluster's DNS search path would turn into Services);
//  4. otherwise allowed. Private ranges (10.0.0.0/8, 172.16.0.0/12,
//     192.168.0.0/16) are allowed: ECR behind a VPC interface endpoint
//     resolves to such addresses.
//
// A name is checked again once resolved, at connect time, against the
// address entries (IP addresses and CIDR ranges) and the built-in address
// ranges in the same order: a public name that resolves to 127.0.0.1 or
// 169.254.169.254 is refused, as is a redirect to such a host. A name allowed
// by an exact entry (not a wildcard) may resolve to any address.
//
// Parse, Default and Open build a Policy, which decides a Host or an Addr
// (registries.go); Policy.Transport wraps an http.RoundTripper so that every
// request, redirect and dialed address is checked (transport.go).
package registries

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Reason says why a host is denied; the values are the metric's label.
type Reason string

// Reasons of a denial.
const (
	ReasonLoopback    Reason = "loopback"
	ReasonLinkLocal   Reason = "link_local"
	ReasonMetadata    Reason = "metadata"
	ReasonClusterName Reason = "cluster_name"
	ReasonDenyEntry   Reason = "deny_entry"
)

// Reasons lists every Reason (for metrics).
var Reasons = []Reason{ReasonLoopback, ReasonLinkLocal, ReasonMetadata, ReasonClusterName, ReasonDenyEntry}

// Describe is the reason in words, for messages.
func (r Reason) Describe() string {
	switch r {
	case ReasonLoopback:
		return "loopback"
	case ReasonLinkLocal:
		return "link-local, such as the instance metadata service"
	case ReasonMetadata:
		return "a cloud's instance metadata service"
	case ReasonClusterName:
		return "an in-cluster name"
	default:
		return "a deny entry"
	}
}

// Config is the JSON of --image-registries: {"allow":[...],"deny":[...]}.
type Config struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Policy decides hosts and addresses; the zero value is not usable: see
// Default, Parse and Open. Safe for concurrent use.
type Policy struct {
	allow, deny []entry
	builtin     bool // the built-in denials apply
}

// Default is the policy without entries: the built-in denials.
func Default() *Policy { return &Policy{builtin: true} }

// Open allows every host (`apportion inspect`, which runs with its user's
// own network access).
func Open() *Policy { return &Policy{} }

// Parse reads the JSON of --image-registries; "" is Default.
func Parse(raw string) (*Policy, error) {
	p := Default()
	if strings.TrimSpace(raw) == "" {
		return p, nil
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf(`want {"allow":[...],"deny":[...]}: %w`, err)
	}
	var errs []error
	for _, list := range []struct {
		name string
		in   []string
		out  *[]entry
	}{{"allow", c.Allow, &p.allow}, {"deny", c.Deny, &p.deny}} {
		for _, s := range list.in {
			e, err := parseEntry(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s entry %q: %w", list.name, s, err))
				continue
			}
			*list.out = append(*list.out, e)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// Verdict is the decision about a host or an address.
type Verdict struct {
	Allowed bool
	// Exact: allowed by an exact entry (a name, an IP address or a range
	// holding it), so the addresses the name resolves to are not checked.
	Exact  bool
	Reason Reason // why it is denied
}

// Host decides a registry host (a name or an IP address, without brackets)
// reached on port (decimal).
func (p *Policy) Host(host, port string) Verdict {
	h, addr, isIP := normalize(host)
	for _, e := range p.allow {
		if e.matchHost(h, addr, isIP, port) {
			return Verdict{Allowed: true, Exact: e.kind == kindName || e.kind == kindPrefix}
		}
	}
	for _, e := range p.deny {
		if e.matchHost(h, addr, isIP, port) {
			return Verdict{Reason: ReasonDenyEntry}
		}
	}
	if p.builtin {
		if isIP {
			if r, ok := builtinAddr(addr); ok {
				return Verdict{Reason: r}
			}
		} else if r, ok := builtinName(h); ok {
			return Verdict{Reason: r}
		}
	}
	return Verdict{Allowed: true}
}

// Addr decides an address a name resolved to, at connect time: only the
// address entries and the built-in address ranges apply.
func (p *Policy) Addr(ap netip.AddrPort) Verdict {
	addr := ap.Addr().Unmap().WithZone("")
	port := strconv.Itoa(int(ap.Port()))
	for _, e := range p.allow {
		if e.kind == kindPrefix && e.matchHost("", addr, true, port) {
			return Verdict{Allowed: true}
		}
	}
	for _, e := range p.deny {
		if e.kind == kindPrefix && e.matchHost("", addr, true, port) {
			return Verdict{Reason: ReasonDenyEntry}
		}
	}
	if p.builtin {
		if r, ok := builtinAddr(addr); ok {
			return Verdict{Reason: r}
		}
	}
	return Verdict{Allowed: true}
}

// open says whether p allows everything, so that no check is needed.
func (p *Policy) open() bool { return !p.builtin && len(p.deny) == 0 }

// DeniedError is a connection the policy refused.
type DeniedError struct {
	Host string // the host as the request named it, without port
	// Addr is the address Host resolved to when the address was refused;
	// invalid when the host itself was.
	Addr   netip.Addr
	Reason Reason
}

func (e *DeniedError) Error() string {
	if e.Addr.IsValid() {
		return fmt.Sprintf("registry host %s resolves to %s, which settings.imageRegistries does not allow (%s)", e.Host, e.Addr, e.Reason.Describe())
	}
	return fmt.Sprintf("registry host %s is not allowed by settings.imageRegistries (%s)", e.Host, e.Reason.Describe())
}

type kind int

const (
	kindAny    kind = iota // *
	kindSuffix             // *.example.com
	kindName               // registry.example.com
	kindPrefix             // an IP address or a CIDR range
)

type entry struct {
	kind   kind
	name   string // kindName: the name; kindSuffix: ".example.com"
	prefix netip.Prefix
	port   string // "": any
}

func (e entry) matchHost(h string, addr netip.Addr, isIP bool, port string) bool {
	if e.port != "" && e.port != port {
		return false
	}
	switch e.kind {
	case kindAny:
		return true
	case kindSuffix:
		return !isIP && strings.HasSuffix(h, e.name)
	case kindName:
		return !isIP && h == e.name
	default:
		return isIP && e.prefix.Contains(addr)
	}
}

func parseEntry(s string) (entry, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case s == "":
		return entry{}, errors.New("empty")
	case s == "*":
		return entry{kind: kindAny}, nil
	case strings.Contains(s, "://"):
		return entry{}, errors.New("a host, not a URL")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return entry{}, errors.New("not a CIDR range")
		}
		return entry{kind: kindPrefix, prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		a = a.Unmap().WithZone("")
		return entry{kind: kindPrefix, prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	return parseHostPort(s)
}

// parseHostPort reads an entry that is a host, with or without a port: an
// IP address, a *.domain wildcard or a host name.
func parseHostPort(s string) (entry, error) {
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return entry{}, fmt.Errorf("port must be in 1..65535, got %q", p)
		}
	} else if strings.Contains(s, ":") {
		return entry{}, errors.New("want host, host:port, [ipv6]:port or a CIDR range")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap().WithZone("")
		return entry{kind: kindPrefix, prefix: netip.PrefixFrom(a, a.BitLen()), port: port}, nil
	}
	host = strings.TrimSuffix(host, ".")
	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		if !isDNSName(suffix) {
			return entry{}, errors.New("not a wildcard *.domain")
		}
		return entry{kind: kindSuffix, name: "." + suffix, port: port}, nil
	}
	if !isDNSName(host) {
		return entry{}, errors.New("not a host name")
	}
	return entry{kind: kindName, name: host, port: port}, nil
}

func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

// normalize lowercases a host and drops its trailing dot, or parses it as
// an IP address (IPv4-mapped IPv6 as IPv4, without zone).
func normalize(host string) (string, netip.Addr, bool) {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return host, a.Unmap().WithZone(""), true
	}
	return host, netip.Addr{}, false
}

var (
	loopbackRanges = []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("::1/128"),
		// Connecting to 0.0.0.0 or :: reaches the local host.
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("::/128"),
	}
	linkLocalRanges = []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"), // EC2 metadata 169.254.169.254, EKS Pod Identity agent 169.254.170.23
		netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("fd00:ec2::/64"), // EC2 metadata fd00:ec2::254, EKS Pod Identity agent fd00:ec2::23
	}
)

// metadataRanges are the clouds' instance metadata services that are not
// link-local addresses (those are denied as link-local).
var metadataRanges = []netip.Prefix{
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud
	netip.MustParsePrefix("192.0.0.192/32"),     // Oracle Cloud (its older address)
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure WireServer
	netip.MustParsePrefix("fd20:ce::254/128"),   // Google Cloud, IPv6
}

// metadataNames are the names of the clouds' metadata services; names
// without a dot (GCE's "metadata", EC2's "instance-data") are in-cluster
// names already.
var metadataNames = []string{
	"metadata.google.internal",   // Google Cloud
	"metadata.goog",              // Google Cloud
	"metadata.tencentyun.com",    // Tencent Cloud
	"instance-data.ec2.internal", // AWS
}

func builtinAddr(a netip.Addr) (Reason, bool) {
	for _, p := range loopbackRanges {
		if p.Contains(a) {
			return ReasonLoopback, true
		}
	}
	for _, p := range metadataRanges {
		if p.Contains(a) {
			return ReasonMetadata, true
		}
	}
	for _, p := range linkLocalRanges {
		if p.Contains(a) {
			return ReasonLinkLocal, true
		}
	}
	return "", false
}

func builtinName(h string) (Reason, bool) {
	switch {
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return ReasonLoopback, true
	case slices.Contains(metadataNames, h):
		return ReasonMetadata, true
	case !strings.Contains(h, "."), strings.HasSuffix(h, ".svc"), strings.HasSuffix(h, ".cluster.local"):
		return ReasonClusterName, true
	}
	return "", false
}
