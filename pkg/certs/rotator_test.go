package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/metrics"
)

const (
	ns         = "apportion-system"
	secretName = "apportion-webhook-cert"
	mutating   = "apportion"
	validating = "apportion-workloads"
)

var (
	start  = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	config = Config{
		Namespace: ns, SecretName: secretName, ServiceName: "apportion-webhook",
		MutatingWebhookConfiguration: mutating, ValidatingWebhookConfiguration: validating,
		CAValidity: 10 * 365 * 24 * time.Hour, CertValidity: 365 * 24 * time.Hour, RenewBefore: 30 * 24 * time.Hour,
	}
	dnsNames = []string{"apportion-webhook", "apportion-webhook.apportion-system", "apportion-webhook.apportion-system.svc",
		"apportion-webhook.apportion-system.svc.cluster.local"}
)

// cluster is a fake API server holding the empty Secret and the two
// configurations (two webhooks in the mutating one).
func cluster(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	if objs == nil {
		objs = []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}},
			&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: mutating},
				Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "pods.apportion.dev"}, {Name: "other.apportion.dev"}}},
			&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: validating},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "workloads.apportion.dev",
					ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("stale")}}}},
		}
	}
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build()
}

// replica is one Rotator with its own cert dir, as each pod has.
func replica(t *testing.T, c client.WithWatch, clk *clocktesting.FakeClock) *Rotator {
	t.Helper()
	cfg := config
	cfg.CertDir = filepath.Join(t.TempDir(), "certs")
	return NewRotator(clk, c, c, cfg)
}

func syncOK(t *testing.T, r *Rotator) {
	t.Helper()
	pending, err := r.sync(context.Background())
	if err != nil || pending {
		t.Fatalf("sync: pending %v, error %v", pending, err)
	}
}

func secretData(t *testing.T, c client.Reader) map[string][]byte {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: secretName}, &s); err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// bundles returns the CA bundle of every webhook of both configurations.
func bundles(t *testing.T, c client.Reader) [][]byte {
	t.Helper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(context.Background(), client.ObjectKey{Name: mutating}, &m); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Name: validating}, &v); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

// configVersions is the resourceVersions of both configurations.
func configVersions(t *testing.T, c client.Reader) string {
	t.Helper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := errors.Join(c.Get(context.Background(), client.ObjectKey{Name: mutating}, &m),
		c.Get(context.Background(), client.ObjectKey{Name: validating}, &v)); err != nil {
		t.Fatal(err)
	}
	return m.ResourceVersion + "," + v.ResourceVersion
}

func expectBundles(t *testing.T, c client.Reader, want []byte) {
	t.Helper()
	got := bundles(t, c)
	if len(got) != 3 {
		t.Fatalf("%d webhooks, want 3", len(got))
	}
	for i, b := range got {
		if !bytes.Equal(b, want) {
			t.Errorf("webhook %d: CA bundle of %d bytes differs from the expected %d bytes", i, len(b), len(want))
		}
	}
}

// expectFiles checks that the cert dir holds what the Secret holds.
func expectFiles(t *testing.T, r *Rotator, data map[string][]byte) {
	t.Helper()
	for _, name := range []string{CertKey, KeyKey, CACertKey} {
		got, err := os.ReadFile(filepath.Join(r.config.CertDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data[name]) {
			t.Errorf("%s in the cert dir differs from the Secret", name)
		}
	}
}

// verifies tells whether the serving pair verifies for every Service name
// against the roots in bundle at the given time.
func verifies(t *testing.T, bundle, certPEM, keyPEM []byte, at time.Time) error {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return errors.New("no certificate in the bundle")
	}
	for _, name := range dnsNames {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: at,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return err
		}
	}
	return nil
}

func rotations(kind string) float64 {
	return testutil.ToFloat64(metrics.CertificateRotationsTotal.WithLabelValues(kind))
}

func TestFirstStartFillsTheSecretAndBothConfigurations(t *testing.T) {
	c := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	r := replica(t, c, clk)
	select {
	case <-r.Ready():
		t.Fatal("ready before the first pass")
	default:
	}
	caBefore, servingBefore := rotations(KindCA), rotations(KindServing)
	syncOK(t, r)

	data := secretData(t, c)
	for _, k := range []string{CACertKey, CAKeyKey, CertKey, KeyKey} {
		if len(data[k]) == 0 {
			t.Errorf("Secret has no %s", k)
		}
	}
	if _, ok := data[PreviousCACertKey]; ok {
		t.Error("a first CA has no predecessor")
	}
	if err := verifies(t, data[CACertKey], data[CertKey], data[KeyKey], start); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	ca, _ := parseCert(data[CACertKey])
	serving, _ := parseCert(data[CertKey])
	if want := start.Add(config.CAValidity); !ca.NotAfter.Equal(want) {
		t.Errorf("CA expires %s, want %s", ca.NotAfter, want)
	}
	if want := start.Add(config.CertValidity); !serving.NotAfter.Equal(want) {
		t.Errorf("serving certificate expires %s, want %s", serving.NotAfter, want)
	}
	expectFiles(t, r, data)
	expectBundles(t, c, data[CACertKey])
	select {
	case <-r.Ready():
	default:
		t.Error("not ready with the certificate in the cert dir")
	}
	if rotations(KindCA) != caBefore+1 || rotations(KindServing) != servingBefore+1 {
		t.Errorf("rotations: ca +%v, serving +%v; want +1 each", rotations(KindCA)-caBefore, rotations(KindServing)-servingBefore)
	}
	if got := testutil.ToFloat64(metrics.CertificateExpiryTimestampSeconds.WithLabelValues(KindServing)); got != float64(serving.NotAfter.Unix()) {
		t.Errorf("serving expiry gauge %v, want %v", got, serving.NotAfter.Unix())
	}
}

func TestSecondReplicaKeepsTheCertificates(t *testing.T) {
	c := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	first, second := replica(t, c, clk), replica(t, c, clk)
	syncOK(t, first)
	var before corev1.Secret
	_ = c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: secretName}, &before)

	clk.Step(time.Hour)
	syncOK(t, second)
	after := secretData(t, c)
	var s corev1.Secret
	_ = c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: secretName}, &s)
	if s.ResourceVersion != before.ResourceVersion {
		t.Errorf("the second replica updated the Secret (resourceVersion %s -> %s)", before.ResourceVersion, s.ResourceVersion)
	}
	expectFiles(t, second, after)
	expectBundles(t, c, after[CACertKey])
}

func TestServingCertificateRenewedWithTheSameCA(t *testing.T) {
	c := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	r := replica(t, c, clk)
	syncOK(t, r)
	first := secretData(t, c)

	// One hour before the renewal window: nothing changes.
	clk.SetTime(start.Add(config.CertValidity - config.RenewBefore - time.Hour))
	syncOK(t, r)
	if !bytes.Equal(secretData(t, c)[CertKey], first[CertKey]) {
		t.Fatal("renewed before the renewal window")
	}
	clk.Step(2 * time.Hour)
	servingBefore := rotations(KindServing)
	configsBefore := configVersions(t, c)
	syncOK(t, r)
	renewed := secretData(t, c)
	if got := configVersions(t, c); got != configsBefore {
		t.Errorf("the webhook configurations changed with the serving certificate (resourceVersions %s -> %s)", configsBefore, got)
	}
	if bytes.Equal(renewed[CertKey], first[CertKey]) || bytes.Equal(renewed[KeyKey], first[KeyKey]) {
		t.Fatal("serving certificate not renewed within the renewal window")
	}
	if !bytes.Equal(renewed[CACertKey], first[CACertKey]) || !bytes.Equal(renewed[CAKeyKey], first[CAKeyKey]) {
		t.Error("the CA changed with the serving certificate")
	}
	if _, ok := renewed[PreviousCACertKey]; ok {
		t.Error("ca-previous.crt without a CA rotation")
	}
	if err := verifies(t, renewed[CACertKey], renewed[CertKey], renewed[KeyKey], clk.Now()); err != nil {
		t.Errorf("renewed certificate: %v", err)
	}
	if rotations(KindServing) != servingBefore+1 {
		t.Error("serving rotation not counted")
	}
	expectFiles(t, r, renewed)
	expectBundles(t, c, renewed[CACertKey])
}

// trustGuard stands in for the writer of replicas and fails the test when a
// write would have a replica serve a certificate the API server does not
// trust: a Secret update that stores a serving certificate a webhook's CA
// bundle does not verify at that moment (every replica loads what the Secret
// holds), or a CA bundle patch after which a bundle no longer verifies the
// Secret's serving certificate or the one a replica serves from its cert dir.
type trustGuard struct {
	t        *testing.T
	clk      *clocktesting.FakeClock
	replicas []*Rotator
	// servingWrites counts the Secret updates that changed the serving
	// certificate.
	servingWrites int
}

func guard(t *testing.T, c client.WithWatch, clk *clocktesting.FakeClock, replicas ...*Rotator) *trustGuard {
	t.Helper()
	g := &trustGuard{t: t, clk: clk, replicas: replicas}
	w := interceptor.NewClient(c, interceptor.Funcs{Update: g.update, Patch: g.patch})
	for _, r := range replicas {
		r.writer = w
	}
	return g
}

func (g *trustGuard) update(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
	if s, ok := obj.(*corev1.Secret); ok {
		if stored := secretData(g.t, c); !bytes.Equal(stored[CertKey], s.Data[CertKey]) {
			g.servingWrites++
			g.trusted(c, "the serving certificate being stored", s.Data[CertKey], s.Data[KeyKey])
		}
	}
	return c.Update(ctx, obj, opts...)
}

func (g *trustGuard) patch(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	data := secretData(g.t, c)
	g.trusted(c, "after a CA bundle patch, the Secret's serving certificate", data[CertKey], data[KeyKey])
	for i, r := range g.replicas {
		cert, errCert := os.ReadFile(filepath.Join(r.config.CertDir, CertKey))
		key, errKey := os.ReadFile(filepath.Join(r.config.CertDir, KeyKey))
		if err := errors.Join(errCert, errKey); err != nil {
			g.t.Errorf("replica %d: %v", i, err)
			continue
		}
		g.trusted(c, fmt.Sprintf("after a CA bundle patch, the certificate replica %d serves", i), cert, key)
	}
	return nil
}

// trusted checks that every webhook's CA bundle, as stored now, verifies the
// serving pair.
func (g *trustGuard) trusted(c client.Reader, what string, certPEM, keyPEM []byte) {
	g.t.Helper()
	for i, b := range bundles(g.t, c) {
		if err := verifies(g.t, b, certPEM, keyPEM, g.clk.Now()); err != nil {
			g.t.Errorf("%s is not trusted by webhook %d's CA bundle: %v", what, i, err)
		}
	}
}

// A CA in its renewal window is replaced with no moment in which a replica
// serves a certificate the API server does not trust: each serving
// certificate is stored only once every CA bundle verifies it, and the old CA
// stays in the bundles while a lagging replica still serves what it signed.
func TestCARotationIsTrustedBeforeItIsServed(t *testing.T) {
	c := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	r := replica(t, c, clk)
	syncOK(t, r)

	// Just before the CA's renewal window, the serving certificate is
	// renewed from the old CA and another replica loads it; that one then
	// lags behind.
	clk.SetTime(start.Add(config.CAValidity - config.RenewBefore - time.Hour))
	lagging := replica(t, c, clk)
	syncOK(t, r)
	syncOK(t, lagging)
	old := secretData(t, c)
	g := guard(t, c, clk, r, lagging)

	clk.Step(2 * time.Hour)
	var data map[string][]byte
	for pass := 1; ; pass++ {
		syncOK(t, r)
		if data = secretData(t, c); !bytes.Equal(data[CACertKey], old[CACertKey]) {
			break
		}
		if pass == 5 {
			t.Fatal("CA not replaced within 5 passes in its renewal window")
		}
		clk.Step(r.Interval())
	}
	if g.servingWrites == 0 {
		t.Fatal("the new CA signed no serving certificate")
	}
	if !bytes.Equal(data[PreviousCACertKey], old[CACertKey]) {
		t.Fatal("the replaced CA is not kept as ca-previous.crt")
	}
	bundle := Bundle(data)
	if !bytes.Contains(bundle, data[CACertKey]) || !bytes.Contains(bundle, old[CACertKey]) {
		t.Fatal("the bundle does not hold both CAs")
	}
	expectBundles(t, c, bundle)
	if err := verifies(t, data[CACertKey], data[CertKey], data[KeyKey], clk.Now()); err != nil {
		t.Errorf("new serving certificate not signed by the new CA: %v", err)
	}
	if err := verifies(t, bundle, old[CertKey], old[KeyKey], clk.Now()); err != nil {
		t.Errorf("the lagging replica's certificate is no longer trusted: %v", err)
	}
	syncOK(t, lagging)
	expectFiles(t, lagging, data)

	// Once the old CA has expired it leaves the Secret and the bundle.
	clk.SetTime(start.Add(config.CAValidity + time.Minute))
	syncOK(t, r)
	data = secretData(t, c)
	if _, ok := data[PreviousCACertKey]; ok {
		t.Error("expired ca-previous.crt kept")
	}
	expectBundles(t, c, data[CACertKey])
}

// The staged CA signs nothing until one replica found it in every CA bundle
// in two passes: a stale replica's patch that took it out of one bundle
// starts the wait again.
func TestStagedCAWaitsForEveryBundle(t *testing.T) {
	c := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	r := replica(t, c, clk)
	syncOK(t, r)
	clk.SetTime(start.Add(config.CAValidity - config.RenewBefore - time.Hour))
	syncOK(t, r)
	old := secretData(t, c)

	clk.Step(2 * time.Hour)
	caBefore := rotations(KindCA)
	syncOK(t, r)
	staged := secretData(t, c)
	if len(staged[NextCACertKey]) == 0 || len(staged[NextCAKeyKey]) == 0 {
		t.Fatal("no CA staged in the renewal window")
	}
	if !bytes.Equal(staged[CACertKey], old[CACertKey]) || !bytes.Equal(staged[CertKey], old[CertKey]) {
		t.Fatal("the staged CA was put to use in the pass that staged it")
	}
	if rotations(KindCA) != caBefore+1 {
		t.Error("the staged CA is not counted")
	}
	expectBundles(t, c, Bundle(staged))

	// A replica that read the Secret before the CA was staged writes the
	// old bundle into one configuration.
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(context.Background(), client.ObjectKey{Name: validating}, &v); err != nil {
		t.Fatal(err)
	}
	v.Webhooks[0].ClientConfig.CABundle = Bundle(old)
	if err := c.Update(context.Background(), &v); err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"missing from one bundle", "found in every bundle once"} {
		clk.Step(r.Interval())
		syncOK(t, r)
		if got := secretData(t, c); !bytes.Equal(got[CACertKey], old[CACertKey]) || !bytes.Equal(got[CertKey], old[CertKey]) ||
			!bytes.Equal(got[NextCACertKey], staged[NextCACertKey]) {
			t.Fatalf("the staged CA was put to use when %s", when)
		}
	}
	clk.Step(r.Interval())
	syncOK(t, r)
	promoted := secretData(t, c)
	if !bytes.Equal(promoted[CACertKey], staged[NextCACertKey]) || !bytes.Equal(promoted[CAKeyKey], staged[NextCAKeyKey]) {
		t.Fatal("the staged CA was not put to use once found in every bundle in two passes")
	}
	if _, ok := promoted[NextCACertKey]; ok {
		t.Error("ca-next.crt kept after its CA was put to use")
	}
	if err := verifies(t, promoted[CACertKey], promoted[CertKey], promoted[KeyKey], clk.Now()); err != nil {
		t.Errorf("serving certificate not signed by the new CA: %v", err)
	}
	expectBundles(t, c, Bundle(promoted))
}

// With nothing that works to keep (the cluster was off past the CA's
// expiry), a new CA signs the serving certificate in the same pass.
func TestExpiredCAIsReplacedAtOnce(t *testing.T) {
	c := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	r := replica(t, c, clk)
	syncOK(t, r)
	old := secretData(t, c)

	clk.SetTime(start.Add(config.CAValidity + time.Hour))
	syncOK(t, r)
	data := secretData(t, c)
	if bytes.Equal(data[CACertKey], old[CACertKey]) {
		t.Fatal("expired CA kept")
	}
	for _, k := range []string{NextCACertKey, PreviousCACertKey} {
		if _, ok := data[k]; ok {
			t.Errorf("%s in the Secret after an expired CA", k)
		}
	}
	if err := verifies(t, data[CACertKey], data[CertKey], data[KeyKey], clk.Now()); err != nil {
		t.Errorf("serving certificate: %v", err)
	}
	expectFiles(t, r, data)
	expectBundles(t, c, data[CACertKey])
}

func TestRacingReplicasConvergeOnOneCA(t *testing.T) {
	base := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	winner := replica(t, base, clk)
	// The loser reads the empty Secret, but the winner stores its
	// certificates before the loser's update arrives.
	raced := false
	loserClient := interceptor.NewClient(base, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.Secret); ok && !raced {
				raced = true
				syncOK(t, winner)
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	loser := replica(t, base, clk)
	loser.writer = loserClient
	syncOK(t, loser)
	if !raced {
		t.Fatal("no race happened")
	}
	data := secretData(t, base)
	expectFiles(t, winner, data)
	expectFiles(t, loser, data)
	expectBundles(t, base, data[CACertKey])
	if _, ok := data[PreviousCACertKey]; ok {
		t.Error("a lost race left a previous CA")
	}
}

func TestCertDirFollowsTheSecret(t *testing.T) {
	c := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	r := replica(t, c, clk)
	syncOK(t, r)
	stat := func(name string) os.FileInfo {
		fi, err := os.Stat(filepath.Join(r.config.CertDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	caFile := stat(CACertKey)

	// Another replica renewed the serving certificate.
	other := replica(t, c, clk)
	var s corev1.Secret
	_ = c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: secretName}, &s)
	delete(s.Data, CertKey)
	if err := c.Update(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	syncOK(t, other)
	data := secretData(t, c)
	syncOK(t, r)
	expectFiles(t, r, data)
	if !os.SameFile(caFile, stat(CACertKey)) {
		t.Error("ca.crt rewritten though it did not change")
	}

	// A damaged file is restored.
	if err := os.WriteFile(filepath.Join(r.config.CertDir, KeyKey), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	syncOK(t, r)
	expectFiles(t, r, data)
	leftovers, _ := filepath.Glob(filepath.Join(r.config.CertDir, ".*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestMissingConfigurationIsRetried(t *testing.T) {
	c := cluster(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}})
	clk := clocktesting.NewFakeClock(start)
	r := replica(t, c, clk)
	pending, err := r.sync(context.Background())
	if err != nil || !pending {
		t.Fatalf("without configurations: pending %v, error %v; want pending", pending, err)
	}
	select {
	case <-r.Ready():
	default:
		t.Error("not ready although the certificate is in the cert dir")
	}
	// Helm creates them a moment later; the next pass fills them.
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: mutating},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "pods.apportion.dev"}, {Name: "other.apportion.dev"}}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: validating},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "workloads.apportion.dev"}}},
	} {
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	syncOK(t, r)
	expectBundles(t, c, secretData(t, c)[CACertKey])
}

func TestConcurrentConfigurationEditIsNotOverwritten(t *testing.T) {
	base := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	r := replica(t, base, clk)
	// Between the rotator's read and its patch, the webhooks are reordered
	// (a Helm upgrade): the patch's test of the name at each index fails as
	// the API server reports it, and the rotator reads again.
	edited := false
	r.writer = interceptor.NewClient(base, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok && !edited {
				edited = true
				var m admissionregistrationv1.MutatingWebhookConfiguration
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &m); err != nil {
					return err
				}
				m.Webhooks = append(m.Webhooks, admissionregistrationv1.MutatingWebhook{Name: "added.apportion.dev"})
				m.Webhooks[0], m.Webhooks[2] = m.Webhooks[2], m.Webhooks[0]
				if err := c.Update(ctx, &m); err != nil {
					return err
				}
			}
			if err := c.Patch(ctx, obj, patch, opts...); err != nil {
				return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch",
					schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}, obj.GetName(), err.Error(), 0, false)
			}
			return nil
		},
	})
	syncOK(t, r)
	if !edited {
		t.Fatal("no concurrent edit happened")
	}
	var m admissionregistrationv1.MutatingWebhookConfiguration
	_ = base.Get(context.Background(), client.ObjectKey{Name: mutating}, &m)
	want := secretData(t, base)[CACertKey]
	if len(m.Webhooks) != 3 {
		t.Fatalf("%d webhooks, want the 3 of the concurrent edit", len(m.Webhooks))
	}
	for _, w := range m.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, want) {
			t.Errorf("webhook %s has no CA bundle", w.Name)
		}
	}
}

func TestStartBecomesReadyAndStops(t *testing.T) {
	c := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	r := replica(t, c, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Start(ctx) }()
	select {
	case <-r.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("not ready after the first pass")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return when its context ended")
	}
}

func TestInterval(t *testing.T) {
	for _, tc := range []struct{ renewBefore, want time.Duration }{
		{720 * time.Hour, 10 * time.Minute},
		{20 * time.Minute, 5 * time.Minute},
		{2 * time.Second, time.Second},
	} {
		r := NewRotator(nil, nil, nil, Config{RenewBefore: tc.renewBefore})
		if got := r.Interval(); got != tc.want {
			t.Errorf("renew before %s: interval %s, want %s", tc.renewBefore, got, tc.want)
		}
	}
}

// A helm upgrade that shortens the validities takes effect at once: the
// next pass replaces a serving certificate that would outlive the new
// settings, from the old CA, and stages a new CA, which replaces the old one
// once the CA bundles hold it; the old CA stays trusted meanwhile.
func TestShortenedValidityReissues(t *testing.T) {
	c := cluster(t)
	clk := clocktesting.NewFakeClock(start)
	syncOK(t, replica(t, c, clk))
	long := secretData(t, c)

	clk.Step(time.Hour)
	cfg := config
	cfg.CertDir = filepath.Join(t.TempDir(), "certs")
	cfg.CAValidity, cfg.CertValidity, cfg.RenewBefore = 4*time.Minute, 2*time.Minute, 80*time.Second
	short := NewRotator(clk, c, c, cfg)
	syncOK(t, short)
	got := secretData(t, c)
	// The first pass shortens the serving certificate, still from the old
	// CA, and stages a new CA.
	if bytes.Equal(got[CertKey], long[CertKey]) {
		t.Fatal("the serving certificate of the old settings was kept")
	}
	if !bytes.Equal(got[CACertKey], long[CACertKey]) || len(got[NextCACertKey]) == 0 {
		t.Fatal("the CA of the old settings was not staged for replacement")
	}
	expectShortLeaf := func(data map[string][]byte) {
		t.Helper()
		leaf, err := parseCert(data[CertKey])
		if err != nil {
			t.Fatal(err)
		}
		if end := leaf.NotAfter.Sub(clk.Now()); end > cfg.CertValidity {
			t.Errorf("the serving certificate lives %s, want at most %s", end, cfg.CertValidity)
		}
		if err := verifies(t, data[CACertKey], data[CertKey], data[KeyKey], clk.Now()); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}
	expectShortLeaf(got)
	for pass := 1; bytes.Equal(got[CACertKey], long[CACertKey]); pass++ {
		if pass > 4 {
			t.Fatal("the CA of the old settings was not replaced within 4 passes")
		}
		clk.Step(short.Interval())
		syncOK(t, short)
		got = secretData(t, c)
	}
	if !bytes.Equal(got[PreviousCACertKey], long[CACertKey]) {
		t.Error("the replaced CA is not kept as the previous one")
	}
	if ca, err := parseCert(got[CACertKey]); err != nil || ca.NotAfter.Sub(clk.Now()) > cfg.CAValidity {
		t.Errorf("the new CA outlives %s (%v)", cfg.CAValidity, err)
	}
	expectShortLeaf(got)
	// And the next pass with the same settings changes nothing.
	clk.Step(10 * time.Second)
	syncOK(t, short)
	if again := secretData(t, c); !maps.EqualFunc(again, got, bytes.Equal) {
		t.Error("changed again although the certificates fit the settings")
	}
}
