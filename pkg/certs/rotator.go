// Package certs keeps the webhook's serving certificate in a Secret that the
// chart creates empty. Every replica fills the Secret when it needs to,
// renews what is about to expire, copies the serving pair into the cert dir
// the webhook server reads (controller-runtime's certwatcher reloads it), and
// sets the CA bundle of the webhook configurations.
//
// A new CA never signs a certificate that a replica serves before the API
// server trusts it. The CA is replaced in three steps, each a pass of a
// replica, the last two of the same one (see renew):
//
//	pass   Secret                                       CA bundles
//	n      ca.crt=A, ca-next.crt=B (staged)             A + B (written by the pass)
//	n+1    unchanged: B found in every bundle once      A + B
//	n+2    B found again: ca.crt=B, ca-previous.crt=A,  B + A
//	       serving certificate signed by B
//	later  A expires and leaves the Secret              B
//
// The serving certificate the Secret holds is therefore always signed by a
// CA that every bundle held in two passes of one replica, an interval apart,
// so every replica that loads it from the Secret serves a certificate the API
// servers already trust. A is trusted until it expires, and nothing it
// signed outlives it. With no working serving certificate to keep (the first
// start, or everything expired), a new CA signs at once.
//
// The certificates come from cert-controller's generators, but not through
// its AddRotator: that starts its own cache, which needs list and watch on
// every Secret of the namespace (Helm's release Secrets included) and on every
// webhook configuration of the cluster. Here each object is read by name with
// a direct GET, so the RBAC can name the Secret and the two configurations and
// grant only get, update and patch on them.
package certs

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"gomodules.xyz/jsonpatch/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/metrics"
)

// Keys of the Secret. The cert dir receives the last three under the same
// names.
const (
	CAKeyKey = "ca.key"
	// NextCACertKey and NextCAKeyKey hold the staged CA: in the webhook
	// configurations' bundles, but signing nothing until every bundle holds
	// it.
	NextCACertKey = "ca-next.crt"
	NextCAKeyKey  = "ca-next.key"
	// PreviousCACertKey holds the CA that was replaced, until it expires, so
	// that the webhook configurations trust both during the overlap.
	PreviousCACertKey = "ca-previous.crt"
	CACertKey         = "ca.crt"
	CertKey           = corev1.TLSCertKey
	KeyKey            = corev1.TLSPrivateKeyKey
)

// Certificate kinds: the values of the metrics' kind label.
const (
	KindCA      = "ca"
	KindServing = "serving"
)

const (
	// caName is the CA's common name and, as cert-controller builds a CA, its
	// one DNS name, which ValidCert checks.
	caName = "apportion-ca"
	// backdate starts every certificate an hour ago, so that an API server
	// whose clock is behind ours accepts it at once.
	backdate    = time.Hour
	maxInterval = 10 * time.Minute
	minInterval = time.Second
	// firstRetry is the wait after a failed or incomplete pass; it doubles up
	// to the check interval.
	firstRetry = time.Second
)

var serverAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}

// Config says what a Rotator manages.
type Config struct {
	// Namespace holds the Secret and the webhook Service.
	Namespace  string
	SecretName string
	// ServiceName is the webhook Service: the serving certificate covers its
	// DNS names.
	ServiceName string
	// CertDir receives tls.crt, tls.key and ca.crt.
	CertDir string
	// MutatingWebhookConfiguration and ValidatingWebhookConfiguration receive
	// the CA bundle in each of their webhooks; an empty name is skipped.
	MutatingWebhookConfiguration   string
	ValidatingWebhookConfiguration string
	CAValidity                     time.Duration
	CertValidity                   time.Duration
	// RenewBefore is how long before its expiry a certificate is replaced.
	RenewBefore time.Duration
}

// Rotator is a manager Runnable for every replica (not only the leader):
// each one needs the serving certificate in its own cert dir.
type Rotator struct {
	clock  clock.Clock
	reader client.Reader
	writer client.Writer
	config Config

	ready     chan struct{}
	readyOnce sync.Once
	// missing holds the webhook configurations last found absent, so that
	// each absence is logged once, not on every retry.
	missing map[string]bool
	// sighted is the staged CA this replica's last pass found in every CA
	// bundle; the next pass that finds it again puts it to use.
	sighted []byte
}

// NewRotator builds a Rotator. reader must read from the API server (the
// manager's GetAPIReader), not from a cache: a cached read would start an
// informer on Secrets or webhook configurations, which the RBAC does not
// allow.
func NewRotator(clk clock.Clock, reader client.Reader, writer client.Writer, config Config) *Rotator {
	return &Rotator{clock: clk, reader: reader, writer: writer, config: config,
		ready: make(chan struct{}), missing: map[string]bool{}}
}

// NeedLeaderElection is false: every replica serves the webhook.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Ready is closed once the serving certificate is in the cert dir.
func (r *Rotator) Ready() <-chan struct{} { return r.ready }

// Interval is the time between two checks: a quarter of RenewBefore, so a
// few missed checks still renew in time, at most 10 minutes and at least 1s.
func (r *Rotator) Interval() time.Duration {
	return max(min(r.config.RenewBefore/4, maxInterval), minInterval)
}

// DNSNames are the names the serving certificate covers, the Service's
// in-cluster names.
func (r *Rotator) DNSNames() []string {
	svc, ns := r.config.ServiceName, r.config.Namespace
	return []string{svc + "." + ns + ".svc", svc, svc + "." + ns, svc + "." + ns + ".svc.cluster.local"}
}

// Start checks at once and then every Interval until ctx ends. A pass that
// failed, or found a webhook configuration missing, is retried sooner.
func (r *Rotator) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("certs").WithValues("secret", klog.KRef(r.config.Namespace, r.config.SecretName))
	ctx = log.IntoContext(ctx, logger)
	backoff := firstRetry
	for {
		wait := r.Interval()
		pending, err := r.sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			logger.Error(err, "managing the webhook certificate", "retryAfter", min(backoff, wait).String())
		}
		if err != nil || pending {
			wait = min(backoff, wait)
			backoff = min(2*backoff, r.Interval())
		} else {
			backoff = firstRetry
		}
		timer := r.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		}
	}
}

// sync makes one pass: the Secret, the cert dir, the webhook
// configurations. pending means a webhook configuration does not exist yet.
func (r *Rotator) sync(ctx context.Context) (pending bool, err error) {
	data, err := r.reconcileSecret(ctx)
	if err != nil {
		return false, err
	}
	setExpiry(data)
	if err := r.writeFiles(ctx, data); err != nil {
		return false, fmt.Errorf("writing the certificate to %s: %w", r.config.CertDir, err)
	}
	r.readyOnce.Do(func() { close(r.ready) })
	return r.injectBundle(ctx, Bundle(data))
}

// reconcileSecret reads the Secret and stores renewed certificates in it
// when needed; it returns the data as stored. Two replicas that renew at
// once both generate, but only the first update wins: the other's
// resourceVersion is stale, it reads again and finds nothing left to do.
func (r *Rotator) reconcileSecret(ctx context.Context) (map[string][]byte, error) {
	key := types.NamespacedName{Namespace: r.config.Namespace, Name: r.config.SecretName}
	var data map[string][]byte
	// Sightings count once per pass, however often a conflict retries.
	sightedBefore, sighted := r.sighted, []byte(nil)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var secret corev1.Secret
		if err := r.reader.Get(ctx, key, &secret); err != nil {
			return fmt.Errorf("getting Secret %s: %w", key, err)
		}
		sighted = nil
		if next := secret.Data[NextCACertKey]; len(next) > 0 {
			held, err := r.bundlesHold(ctx, next)
			if err != nil {
				log.FromContext(ctx).Error(err, "reading the CA bundles; the staged CA waits")
			}
			if held {
				sighted = next
			}
		}
		trusted := sighted != nil && bytes.Equal(sighted, sightedBefore)
		renewed, rotated, changed, err := r.renew(secret.Data, r.clock.Now(), trusted)
		if err != nil {
			return err
		}
		if !changed {
			data = secret.Data
			return nil
		}
		secret.Data = renewed
		if err := r.writer.Update(ctx, &secret); err != nil {
			return fmt.Errorf("updating Secret %s: %w", key, err)
		}
		for _, kind := range rotated {
			metrics.CertificateRotationsTotal.WithLabelValues(kind).Inc()
		}
		log.FromContext(ctx).Info("stored the certificates", "generated", rotated,
			"caExpiry", expiry(renewed[CACertKey]), "stagedCAExpiry", expiry(renewed[NextCACertKey]),
			"servingExpiry", expiry(renewed[CertKey]))
		data = renewed
		return nil
	})
	r.sighted = sighted
	return data, err
}

// renew returns the Secret's data as it should be at now, the kinds of
// certificate it generated, and whether anything differs from data.
// nextTrusted says that every CA bundle held the staged CA in this pass and
// the one before.
func (r *Rotator) renew(data map[string][]byte, now time.Time, nextTrusted bool) (out map[string][]byte, rotated []string, changed bool, err error) {
	out = maps.Clone(data)
	if out == nil {
		out = map[string][]byte{}
	}
	gen := r.generator()
	lookahead := now.Add(r.config.RenewBefore)
	if prev, ok := out[PreviousCACertKey]; ok {
		if c, err := parseCert(prev); err != nil || !now.Before(c.NotAfter) {
			delete(out, PreviousCACertKey)
		}
	}
	ca, caErr := r.lastingCA(out[CACertKey], out[CAKeyKey], now)
	next, nextErr := r.lastingCA(out[NextCACertKey], out[NextCAKeyKey], now)
	// working: replicas serve a certificate the bundles trust, which a
	// switch of CA must not break.
	working := r.validServing(out, now)
	reissue := false
	switch {
	case caErr == nil:
		// A staged CA is not needed (the validity was lengthened again);
		// nothing it signed was ever served.
		delete(out, NextCACertKey)
		delete(out, NextCAKeyKey)
	case nextErr == nil && (nextTrusted || !working):
		// Every bundle holds it (or nothing served works, so there is no
		// trust to keep). An older previous CA goes: what it signed was
		// replaced at the last switch, most of a CA's lifetime ago.
		retire(out, data[CACertKey], now)
		out[CACertKey], out[CAKeyKey] = next.CertPEM, next.KeyPEM
		delete(out, NextCACertKey)
		delete(out, NextCAKeyKey)
		ca, reissue = next, true
	case nextErr == nil:
		// Staged, and waiting for every bundle to hold it.
	case working:
		staged, err := gen.CreateCACert(now.Add(-backdate), now.Add(r.config.CAValidity))
		if err != nil {
			return nil, nil, false, fmt.Errorf("generating the CA: %w", err)
		}
		out[NextCACertKey], out[NextCAKeyKey] = staged.CertPEM, staged.KeyPEM
		rotated = append(rotated, KindCA)
	default:
		// No replica serves a certificate that works: no trust to keep,
		// and the quickest way back is a CA that signs at once.
		if ca, err = gen.CreateCACert(now.Add(-backdate), now.Add(r.config.CAValidity)); err != nil {
			return nil, nil, false, fmt.Errorf("generating the CA: %w", err)
		}
		retire(out, data[CACertKey], now)
		out[CACertKey], out[CAKeyKey] = ca.CertPEM, ca.KeyPEM
		delete(out, NextCACertKey)
		delete(out, NextCAKeyKey)
		rotated, reissue = append(rotated, KindCA), true
	}
	switch {
	case reissue:
	case caErr == nil:
		reissue = !r.validServing(out, lookahead) || r.servingOutlives(out[CertKey], now)
	default:
		// While the next CA waits, the outgoing one, still trusted, only
		// shortens a serving certificate that outlives --cert-validity: a
		// renewal would end with that CA anyway.
		signer, err := parseCA(out[CACertKey], out[CAKeyKey], now)
		ca, reissue = signer, err == nil && r.servingOutlives(out[CertKey], now)
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

func setExpiry(data map[string][]byte) {
	for kind, key := range map[string]string{KindCA: CACertKey, KindServing: CertKey} {
		if c, err := parseCert(data[key]); err == nil {
			metrics.CertificateExpiryTimestampSeconds.WithLabelValues(kind).Set(float64(c.NotAfter.Unix()))
		}
	}
}

// Bundle is what the webhook configurations trust: the current CA, the
// staged one while it waits, and the previous one while it is kept.
func Bundle(data map[string][]byte) []byte {
	bundle := bytes.Clone(data[CACertKey])
	for _, k := range []string{NextCACertKey, PreviousCACertKey} {
		if ca := data[k]; len(ca) > 0 {
			if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
				bundle = append(bundle, '\n')
			}
			bundle = append(bundle, ca...)
		}
	}
	return bundle
}

// writeFiles puts the serving pair and the CA into the cert dir, each file
// only when it differs. Each file is replaced by a rename, so the webhook
// server's certwatcher never reads a partial file; between the two renames it
// may read a mismatched pair, which it rejects, keeping the old one until the
// second rename.
func (r *Rotator) writeFiles(ctx context.Context, data map[string][]byte) error {
	if err := os.MkdirAll(r.config.CertDir, 0o700); err != nil {
		return err
	}
	var written []string
	for _, name := range []string{KeyKey, CertKey, CACertKey} {
		path := filepath.Join(r.config.CertDir, name)
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data[name]) {
			continue
		}
		if err := writeAtomic(path, data[name]); err != nil {
			return err
		}
		written = append(written, name)
	}
	if len(written) > 0 {
		log.FromContext(ctx).Info("wrote the certificate files", "dir", r.config.CertDir, "files", written)
	}
	return nil
}

func writeAtomic(path string, content []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// configuration is one webhook configuration the Rotator manages.
type configuration struct {
	kind, name string
	new        func() client.Object
}

// configurations lists the named webhook configurations.
func (r *Rotator) configurations() []configuration {
	var out []configuration
	for _, c := range []configuration{
		{"MutatingWebhookConfiguration", r.config.MutatingWebhookConfiguration,
			func() client.Object { return &admissionregistrationv1.MutatingWebhookConfiguration{} }},
		{"ValidatingWebhookConfiguration", r.config.ValidatingWebhookConfiguration,
			func() client.Object { return &admissionregistrationv1.ValidatingWebhookConfiguration{} }},
	} {
		if c.name != "" {
			out = append(out, c)
		}
	}
	return out
}

// injectBundle makes the CA bundle of every webhook in both configurations
// equal to bundle.
func (r *Rotator) injectBundle(ctx context.Context, bundle []byte) (pending bool, err error) {
	var errs []error
	for _, c := range r.configurations() {
		found, err := r.injectInto(ctx, c.kind, c.name, c.new, bundle)
		if err != nil {
			errs = append(errs, err)
		}
		pending = pending || !found
	}
	return pending, errors.Join(errs...)
}

// bundlesHold tells whether the CA bundle of every webhook in both
// configurations, as the API server returns it now, holds the certificate
// caPEM. A configuration that does not exist calls no webhook, so it holds
// nothing back.
func (r *Rotator) bundlesHold(ctx context.Context, caPEM []byte) (bool, error) {
	want, err := parseCert(caPEM)
	if err != nil {
		return false, err
	}
	for _, c := range r.configurations() {
		obj := c.new()
		if err := r.reader.Get(ctx, client.ObjectKey{Name: c.name}, obj); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return false, fmt.Errorf("getting %s %s: %w", c.kind, c.name, err)
		}
		_, bundles := webhookBundles(obj)
		for _, b := range bundles {
			if !holds(b, want) {
				return false, nil
			}
		}
	}
	return true, nil
}

// holds tells whether the PEM bundle contains cert.
func holds(bundle []byte, cert *x509.Certificate) bool {
	for {
		var block *pem.Block
		if block, bundle = pem.Decode(bundle); block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" && bytes.Equal(block.Bytes, cert.Raw) {
			return true
		}
	}
}

// injectInto patches one configuration. The patch tests each webhook's name
// at its index, so a concurrent edit of the list (a Helm upgrade) fails it
// rather than being overwritten; it is then read and patched again.
func (r *Rotator) injectInto(ctx context.Context, kind, name string, newObj func() client.Object, bundle []byte) (found bool, err error) {
	logger := log.FromContext(ctx).WithValues("kind", kind, "name", name)
	found = true
	err = retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsInvalid(err)
	}, func() error {
		obj := newObj()
		if err := r.reader.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			return err
		}
		ops := bundlePatch(obj, bundle)
		if len(ops) == 0 {
			return nil
		}
		patch, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		if err := r.writer.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			return err
		}
		logger.Info("set the CA bundle", "webhooks", len(ops)/2)
		return nil
	})
	if apierrors.IsNotFound(err) {
		if !r.missing[name] {
			logger.Info("webhook configuration not found yet, will retry")
		}
		r.missing[name] = true
		return false, nil
	}
	delete(r.missing, name)
	if err != nil {
		return true, fmt.Errorf("setting the CA bundle of %s %s: %w", kind, name, err)
	}
	return true, nil
}

// bundlePatch is the JSON patch that sets bundle in every webhook of obj
// that does not have it yet.
func bundlePatch(obj client.Object, bundle []byte) []jsonpatch.Operation {
	names, current := webhookBundles(obj)
	var ops []jsonpatch.Operation
	for i := range names {
		if bytes.Equal(current[i], bundle) {
			continue
		}
		ops = append(ops,
			jsonpatch.NewOperation("test", fmt.Sprintf("/webhooks/%d/name", i), names[i]),
			jsonpatch.NewOperation("add", fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), bundle))
	}
	return ops
}

// webhookBundles returns the name and CA bundle of each webhook of a
// configuration, in order.
func webhookBundles(obj client.Object) (names []string, bundles [][]byte) {
	switch c := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			names, bundles = append(names, w.Name), append(bundles, w.ClientConfig.CABundle)
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			names, bundles = append(names, w.Name), append(bundles, w.ClientConfig.CABundle)
		}
	}
	return names, bundles
}
