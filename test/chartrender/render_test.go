//go:build chart

package chartrender

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/apportion-dev/apportion/test/helmbin"
)

const (
	release   = "apportion"
	namespace = "apportion-system"
	injectCA  = "cert-manager.io/inject-ca-from"
	// kubeVersion is the newest that make helm-lint renders for.
	kubeVersion = "1.36.0"
	// imageRepository is set on every render: the chart refuses to render
	// without one.
	imageRepository = "registry.example.com/apportion"
)

func TestMain(m *testing.M) {
	code := m.Run()
	helmbin.Cleanup()
	os.Exit(code)
}

// chartDir is the chart under test, relative to this package.
var chartDir = filepath.Join("..", "..", "chart")

// render runs helm template on chart/ with the given --set values and
// returns the objects, keyed by "Kind/name".
func render(t *testing.T, set ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	var flags []string
	for _, s := range set {
		flags = append(flags, "--set", s)
	}
	out, err := helmTemplate(t, chartDir, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return objects(t, out)
}

// helmTemplate runs helm template on chart for Kubernetes kubeVersion, with
// the image repository and the given flags (which may override both), and
// returns what it printed; a failed render's error holds helm's stderr.
func helmTemplate(t *testing.T, chart string, flags ...string) ([]byte, error) {
	t.Helper()
	return helmRun(t, append([]string{"template", release, chart, "-n", namespace, "--kube-version", kubeVersion,
		"--set", "controller.image.repository=" + imageRepository}, flags...))
}

// helmRun runs helm with args in a home of its own.
func helmRun(t *testing.T, args []string) ([]byte, error) {
	t.Helper()
	helm, err := helmbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("running helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// objects parses helm template's output, keyed by "Kind/name".
func objects(t *testing.T, out []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("parsing a rendered object: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		key := u.GetKind() + "/" + u.GetName()
		if _, dup := objs[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		objs[key] = u
	}
	return objs
}

func get(t *testing.T, objs map[string]*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	u, ok := objs[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %s rendered", kind, name)
	}
	return u
}

func str(u *unstructured.Unstructured, fields ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, fields...)
	return s
}

// issuerRef is a Certificate's spec.issuerRef as "kind/name".
func issuerRef(t *testing.T, cert *unstructured.Unstructured) string {
	t.Helper()
	if g := str(cert, "spec", "issuerRef", "group"); g != "cert-manager.io" {
		t.Errorf("Certificate %s: issuerRef group %q, want cert-manager.io", cert.GetName(), g)
	}
	return str(cert, "spec", "issuerRef", "kind") + "/" + str(cert, "spec", "issuerRef", "name")
}

func expectInjectFrom(t *testing.T, objs map[string]*unstructured.Unstructured, want string) {
	t.Helper()
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		got, ok := get(t, objs, kind, release).GetAnnotations()[injectCA]
		switch {
		case want == "" && ok:
			t.Errorf("%s: %s %q, want none", kind, injectCA, got)
		case want != "" && got != want:
			t.Errorf("%s: %s %q, want %q", kind, injectCA, got, want)
		}
	}
}

func certManagerObjects(objs map[string]*unstructured.Unstructured) []string {
	var out []string
	for key, u := range objs {
		if strings.HasPrefix(u.GetAPIVersion(), "cert-manager.io/") {
			out = append(out, key)
		}
	}
	return out
}

// In cert-manager mode the chart makes its own CA: a self-signed Issuer
// signs a long-lived CA Certificate, a CA Issuer signs the serving
// Certificate with it, and the CA injector copies the CA, not the serving
// certificate, into the webhook configurations. Renewing the serving
// certificate then leaves the trusted CA unchanged, so no replica serves a
// certificate the API server does not trust yet.
func TestCertManagerChainOfTrust(t *testing.T) {
	objs := render(t, "certificates.mode=cert-manager")
	if n := len(certManagerObjects(objs)); n != 4 {
		t.Errorf("%d cert-manager objects (%v), want 4: the self-signed Issuer, the CA Certificate, the CA Issuer and the serving Certificate",
			n, certManagerObjects(objs))
	}
	selfSigned := get(t, objs, "Issuer", release+"-selfsigned")
	if _, ok, _ := unstructured.NestedMap(selfSigned.Object, "spec", "selfSigned"); !ok {
		t.Errorf("Issuer %s is not self-signed", selfSigned.GetName())
	}

	ca := get(t, objs, "Certificate", release+"-ca")
	if isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA"); !isCA {
		t.Error("the CA Certificate has no isCA: true")
	}
	if got, want := issuerRef(t, ca), "Issuer/"+selfSigned.GetName(); got != want {
		t.Errorf("the CA Certificate is issued by %s, want %s", got, want)
	}
	if str(ca, "spec", "secretName") == "" || str(ca, "spec", "secretName") == release+"-cert" {
		t.Errorf("the CA Certificate's secretName %q is not its own", str(ca, "spec", "secretName"))
	}
	// A renewed CA that keeps its key still verifies what it signed before.
	if got := str(ca, "spec", "privateKey", "rotationPolicy"); got != "Never" {
		t.Errorf("the CA Certificate's privateKey.rotationPolicy is %q, want Never", got)
	}
	if d := str(ca, "spec", "duration"); d != "43800h" {
		t.Errorf("the CA Certificate lasts %q, want 43800h (5 years)", d)
	}

	caIssuer := get(t, objs, "Issuer", release+"-ca")
	if got, want := str(caIssuer, "spec", "ca", "secretName"), str(ca, "spec", "secretName"); got != want {
		t.Errorf("the CA Issuer signs with Secret %q, want the CA Certificate's %q", got, want)
	}

	serving := get(t, objs, "Certificate", release+"-cert")
	if got, want := issuerRef(t, serving), "Issuer/"+caIssuer.GetName(); got != want {
		t.Errorf("the serving Certificate is issued by %s, want the CA Issuer %s", got, want)
	}
	if isCA, _, _ := unstructured.NestedBool(serving.Object, "spec", "isCA"); isCA {
		t.Error("the serving Certificate is a CA")
	}
	if got := str(serving, "spec", "secretName"); got != release+"-cert" {
		t.Errorf("the serving Certificate writes Secret %q, want %s-cert (the pods mount it)", got, release)
	}
	names, _, _ := unstructured.NestedStringSlice(serving.Object, "spec", "dnsNames")
	if want := release + "." + namespace + ".svc"; !contains(names, want) {
		t.Errorf("the serving Certificate's dnsNames %v lack %s", names, want)
	}

	expectInjectFrom(t, objs, namespace+"/"+ca.GetName())
}

// With an issuer of the user's, the chart makes no CA of its own, and the CA
// injector takes the CA from the serving Certificate's Secret (its ca.crt is
// the user's CA).
func TestCertManagerWithTheUsersIssuer(t *testing.T) {
	objs := render(t, "certificates.mode=cert-manager", "certificates.certManager.issuerRef.name=my-ca",
		"certificates.certManager.issuerRef.kind=ClusterIssuer")
	if got := certManagerObjects(objs); len(got) != 1 {
		t.Errorf("cert-manager objects %v, want only the serving Certificate", got)
	}
	serving := get(t, objs, "Certificate", release+"-cert")
	if got := issuerRef(t, serving); got != "ClusterIssuer/my-ca" {
		t.Errorf("the serving Certificate is issued by %s, want ClusterIssuer/my-ca", got)
	}
	expectInjectFrom(t, objs, namespace+"/"+serving.GetName())
}

// Self-managed: apportion writes the CA bundles; nothing of cert-manager.
func TestSelfManagedHasNoCertManager(t *testing.T) {
	objs := render(t)
	if got := certManagerObjects(objs); len(got) > 0 {
		t.Errorf("cert-manager objects %v in self-managed mode", got)
	}
	expectInjectFrom(t, objs, "")
	get(t, objs, "Secret", release+"-cert")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
