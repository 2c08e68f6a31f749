package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is long enough for a demo cluster left running for weeks and
// short enough that a leaked key is worthless soon.
const certValidity = 90 * 24 * time.Hour

// loopbackHosts are the names every serving certificate of the cluster
// carries: the API server refuses to call a webhook whose certificate has no
// IP SAN for the address it dials.
var loopbackHosts = []string{"127.0.0.1", "::1", "localhost"}

// authority is the cluster's single CA: it signs the serving certificates
// of every component and the admin client certificate.
type authority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// keyPair is a PEM certificate and its PEM private key.
type keyPair struct {
	certPEM []byte
	keyPEM  []byte
}

func newAuthority(commonName string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour), // tolerate small clock skew
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// serving issues a server certificate for hosts, each an IP address or a DNS
// name.
func (a *authority) serving(commonName string, hosts ...string) (keyPair, error) {
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, h)
		}
	}
	return a.issue(template)
}

// client issues a client certificate; Kubernetes reads the user from the
// common name and the groups from the organizations.
func (a *authority) client(user string, groups ...string) (keyPair, error) {
	return a.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (a *authority) issue(template *x509.Certificate) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating key for %q: %w", template.Subject.CommonName, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return keyPair{}, err
	}
	now := time.Now()
	template.SerialNumber = serial
	template.NotBefore = now.Add(-time.Hour)
	template.NotAfter = now.Add(certValidity)
	der, err := x509.CreateCertificate(rand.Reader, template, a.cert, key.Public(), a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing certificate for %q: %w", template.Subject.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// write stores the pair as dir/name.crt and dir/name.key and returns both
// paths.
func (kp keyPair) write(dir, name string) (certFile, keyFile string, err error) {
	certFile = filepath.Join(dir, name+".crt")
	keyFile = filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, kp.certPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("writing certificate: %w", err)
	}
	if err := os.WriteFile(keyFile, kp.keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("writing key: %w", err)
	}
	return certFile, keyFile, nil
}

// newServiceAccountKeys returns an RSA key pair in PEM: the API server signs
// service-account tokens with the private key and verifies them, like the
// controller-manager's token controller, with the public one.
func newServiceAccountKeys() (private, public []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, fmt.Errorf("generating service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding service-account public key: %w", err)
	}
	private = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	public = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	return private, public, nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("drawing certificate serial: %w", err)
	}
	return serial, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// writePKI creates the cluster's CA and every certificate and key the
// components read, in <run>/pki (see pkiPath).
func (c *Cluster) writePKI() error {
	dir := filepath.Join(c.dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating pki folder: %w", err)
	}
	ca, err := newAuthority("apportion-local-ca")
	if err != nil {
		return err
	}
	c.pki = ca
	if err := os.WriteFile(c.pkiPath("ca.crt"), ca.certPEM, 0o644); err != nil {
		return fmt.Errorf("writing CA certificate: %w", err)
	}
	// The controller-manager signs CSRs with the CA.
	if err := os.WriteFile(c.pkiPath("ca.key"), ca.keyPEM, 0o600); err != nil {
		return fmt.Errorf("writing CA key: %w", err)
	}
	serving := append([]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc"}, loopbackHosts...)
	pairs := []struct {
		name  string
		issue func() (keyPair, error)
	}{
		{"apiserver", func() (keyPair, error) { return ca.serving("kube-apiserver", serving...) }},
		{"controller-manager", func() (keyPair, error) { return ca.serving("kube-controller-manager", loopbackHosts...) }},
		{"scheduler", func() (keyPair, error) { return ca.serving("kube-scheduler", loopbackHosts...) }},
		{"admin", func() (keyPair, error) { return ca.client("apportion-admin", "system:masters") }},
		// The aggregation layer's proxy identity. With it configured, the
		// API server publishes the request-header CA that the
		// controller-manager's and scheduler's delegated authentication read.
		{"front-proxy-client", func() (keyPair, error) { return ca.client("front-proxy-client") }},
	}
	for _, p := range pairs {
		kp, err := p.issue()
		if err != nil {
			return err
		}
		if _, _, err := kp.write(dir, p.name); err != nil {
			return fmt.Errorf("writing %s certificate: %w", p.name, err)
		}
		if p.name == "admin" {
			c.admin = kp
		}
	}
	private, public, err := newServiceAccountKeys()
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.pkiPath("sa.key"), private, 0o600); err != nil {
		return fmt.Errorf("writing service-account key: %w", err)
	}
	if err := os.WriteFile(c.pkiPath("sa.pub"), public, 0o644); err != nil {
		return fmt.Errorf("writing service-account public key: %w", err)
	}
	return nil
}

// pkiPath is the path of a file written by writePKI.
func (c *Cluster) pkiPath(name string) string { return filepath.Join(c.dir, "pki", name) }
