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
//
// What is here: the Rotator, the Runnable that runs the passes, reads and
// updates the Secret and writes the cert dir (rotator.go); the decisions of
// a pass, which CA signs and when the serving certificate is issued again,
// with the parsing and validity checks behind them (renew.go); Bundle and
// the JSON patches that keep it in every webhook of both configurations
// (bundle.go).
package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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

func setExpiry(data map[string][]byte) {
	for kind, key := range map[string]string{KindCA: CACertKey, KindServing: CertKey} {
		if c, err := parseCert(data[key]); err == nil {
			metrics.CertificateExpiryTimestampSeconds.WithLabelValues(kind).Set(float64(c.NotAfter.Unix()))
		}
	}
}
