package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestServingCertificateVerifiesForLoopback checks what the API server
// demands of a webhook's certificate: it verifies against the CA for an IP
// SAN of 127.0.0.1 (a DNS-only certificate is refused) and for ::1 and
// localhost.
func TestServingCertificateVerifiesForLoopback(t *testing.T) {
	ca, err := newAuthority("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.serving("webhook", loopbackHosts...)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := kp.write(t.TempDir(), "tls")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(certFile) != "tls.crt" || filepath.Base(keyFile) != "tls.key" {
		t.Errorf("files %s, %s; want tls.crt and tls.key (controller-runtime's names)", certFile, keyFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("loading the written pair: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.certPEM)
	for _, host := range []string{"127.0.0.1", "::1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("verifying for %s: %v", host, err)
		}
	}
	if !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("first IP SAN %v, want 127.0.0.1", leaf.IPAddresses[0])
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("certificate verifies for example.com, want only loopback names")
	}
	info, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", info.Mode().Perm())
	}
}

// TestAdminCertificateIsSystemMasters checks the admin client certificate
// carries the group that RBAC grants everything to.
func TestAdminCertificateIsSystemMasters(t *testing.T) {
	ca, err := newAuthority("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.client("admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.certPEM, kp.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.certPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verifying as a client certificate: %v", err)
	}
	if got := leaf.Subject.Organization; len(got) != 1 || got[0] != "system:masters" {
		t.Errorf("organizations %v, want [system:masters]", got)
	}
}
