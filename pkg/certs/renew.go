package certs

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
)

// renew returns the Secret's data as it should be at now, the kinds of
// certificate it generated, and whether anything differs from data.
// nextTrusted says that every CA bundle held the staged CA in this pass and
// the one before.
func (r *Rotator) renew(data map[string][]byte, now time.Time, nextTrusted bool) (out map[string][]byte, rotated []string, changed bool, err error) {
	out = maps.Clone(data)
	if out == nil {
		out = map[string][]byte{}
	}
	if prev, ok := out[PreviousCACertKey]; ok {
		if c, err := parseCert(prev); err != nil || !now.Before(c.NotAfter) {
			delete(out, PreviousCACertKey)
		}
	}
	gen := r.generator()
	ca, reissue, generated, err := r.settleCA(gen, out, data[CACertKey], now, nextTrusted)
	if err != nil {
		return nil, nil, false, err
	}
	if generated {
		rotated = append(rotated, KindCA)
	}
	if reissue {
		// A certificate does not outlive its issuer.
		end := now.Add(r.config.CertValidity)
		if ca.Cert.NotAfter.Before(end) {
			end = ca.Cert.NotAfter
		}
		cert, key, err := gen.CreateCertPEM(ca, now.Add(-backdate), end)
		if err != nil {
			return nil, nil, false, fmt.Errorf("generating the serving certificate: %w", err)
		}
		out[CertKey], out[KeyKey] = cert, key
		rotated = append(rotated, KindServing)
	}
	return out, rotated, !maps.EqualFunc(out, data, bytes.Equal), nil
}

// settleCA takes renew's CA step on out: it drops a staged CA that is not
// needed, puts one every bundle holds to use, stages a new one, or, with no
// working serving certificate to keep, replaces the CA at once. It returns
// the CA that signs the serving certificate, whether that certificate must be
// issued again, and whether a CA was generated. outgoing is the current CA as
// the Secret held it.
func (r *Rotator) settleCA(gen *rotator.CertRotator, out map[string][]byte, outgoing []byte, now time.Time, nextTrusted bool) (ca *rotator.KeyPairArtifacts, reissue, generated bool, err error) {
	ca, caErr := r.lastingCA(out[CACertKey], out[CAKeyKey], now)
	next, nextErr := r.lastingCA(out[NextCACertKey], out[NextCAKeyKey], now)
	// working: replicas serve a certificate the bundles trust, which a
	// switch of CA must not break.
	working := r.validServing(out, now)
	switch {
	case caErr == nil:
		// A staged CA is not needed (the validity was lengthened again);
		// nothing it signed was ever served.
		delete(out, NextCACertKey)
		delete(out, NextCAKeyKey)
		lookahead := now.Add(r.config.RenewBefore)
		return ca, !r.validServing(out, lookahead) || r.servingOutlives(out[CertKey], now), false, nil
	case nextErr == nil && (nextTrusted || !working):
		// Every bundle holds it (or nothing served works, so there is no
		// trust to keep). An older previous CA goes: what it signed was
		// replaced at the last switch, most of a CA's lifetime ago.
		install(out, outgoing, next, now)
		return next, true, false, nil
	case nextErr == nil:
		// Staged, and waiting for every bundle to hold it.
	case working:
		staged, err := gen.CreateCACert(now.Add(-backdate), now.Add(r.config.CAValidity))
		if err != nil {
			return nil, false, false, fmt.Errorf("generating the CA: %w", err)
		}
		out[NextCACertKey], out[NextCAKeyKey] = staged.CertPEM, staged.KeyPEM
		generated = true
	default:
		// No replica serves a certificate that works: no trust to keep,
		// and the quickest way back is a CA that signs at once.
		if ca, err = gen.CreateCACert(now.Add(-backdate), now.Add(r.config.CAValidity)); err != nil {
			return nil, false, false, fmt.Errorf("generating the CA: %w", err)
		}
		install(out, outgoing, ca, now)
		return ca, true, true, nil
	}
	// While the next CA waits, the outgoing one, still trusted, only
	// shortens a serving certificate that outlives --cert-validity: a
	// renewal would end with that CA anyway.
	signer, parseErr := parseCA(out[CACertKey], out[CAKeyKey], now)
	return signer, parseErr == nil && r.servingOutlives(out[CertKey], now), generated, nil
}

// install makes ca the current CA of out, with nothing staged.
func install(out map[string][]byte, outgoing []byte, ca *rotator.KeyPairArtifacts, now time.Time) {
	retire(out, outgoing, now)
	out[CACertKey], out[CAKeyKey] = ca.CertPEM, ca.KeyPEM
	delete(out, NextCACertKey)
	delete(out, NextCAKeyKey)
}

// retire keeps the outgoing CA as the previous one while it is valid:
// replicas that have not read the new serving certificate yet still serve
// one it signed.
func retire(out map[string][]byte, caPEM []byte, now time.Time) {
	if old, err := parseCert(caPEM); err == nil && now.Before(old.NotAfter) {
		out[PreviousCACertKey] = caPEM
	} else {
		delete(out, PreviousCACertKey)
	}
}

// lastingCA returns the CA if it is valid until the renewal window and does
// not outlive --ca-validity.
func (r *Rotator) lastingCA(certPEM, keyPEM []byte, now time.Time) (*rotator.KeyPairArtifacts, error) {
	ca, err := parseCA(certPEM, keyPEM, now.Add(r.config.RenewBefore))
	if err == nil && outlives(ca.Cert, now, r.config.CAValidity) {
		err = errors.New("the CA outlives --ca-validity")
	}
	return ca, err
}

// outlives tells whether c ends later than a certificate issued now with
// validity would: the validity was shortened since c was made (a helm
// upgrade), and the shorter one takes effect at once rather than in a year.
// A minute of slack absorbs the backdating and clock steps.
func outlives(c *x509.Certificate, now time.Time, validity time.Duration) bool {
	return c.NotAfter.After(now.Add(validity + time.Minute))
}

func (r *Rotator) servingOutlives(certPEM []byte, now time.Time) bool {
	c, err := parseCert(certPEM)
	return err == nil && outlives(c, now, r.config.CertValidity)
}

// generator is cert-controller's rotator used only for its certificate
// templates. ExtKeyUsages must be set: CreateCertPEM dereferences it.
func (r *Rotator) generator() *rotator.CertRotator {
	names := r.DNSNames()
	usages := serverAuth
	return &rotator.CertRotator{CAName: caName, CAOrganization: "apportion",
		DNSName: names[0], ExtraDNSNames: names[1:], ExtKeyUsages: &usages}
}

// validServing tells whether the serving pair was signed by the current CA,
// covers every DNS name for server auth, and is still valid at the given time.
func (r *Rotator) validServing(data map[string][]byte, at time.Time) bool {
	usages := serverAuth
	for _, name := range r.DNSNames() {
		if ok, err := rotator.ValidCert(data[CACertKey], data[CertKey], data[KeyKey], name, &usages, at); !ok || err != nil {
			return false
		}
	}
	return true
}

// parseCA returns the CA if its certificate and key match, it can sign, and
// it is still valid at lookahead.
func parseCA(certPEM, keyPEM []byte, lookahead time.Time) (*rotator.KeyPairArtifacts, error) {
	if ok, err := rotator.ValidCert(certPEM, certPEM, keyPEM, caName, nil, lookahead); err != nil {
		return nil, fmt.Errorf("validating the CA: %w", err)
	} else if !ok {
		return nil, errors.New("the CA is not valid")
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("the CA certificate cannot sign certificates")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block in the CA key")
	}
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		// cert-controller writes PKCS#1; accept an RSA key in PKCS#8 too.
		k, err8 := x509.ParsePKCS8PrivateKey(block.Bytes)
		rsaKey, ok := k.(*rsa.PrivateKey)
		if err8 != nil || !ok {
			return nil, fmt.Errorf("parsing the CA key: %w", err)
		}
		key = rsaKey
	}
	return &rotator.KeyPairArtifacts{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("no PEM block in the certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func expiry(certPEM []byte) string {
	c, err := parseCert(certPEM)
	if err != nil {
		return ""
	}
	return c.NotAfter.UTC().Format(time.RFC3339)
}
