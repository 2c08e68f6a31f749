package releasekit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestParseVersion(t *testing.T) {
	good := map[string]string{
		"v1.2.3": "1.2.3", "v0.0.0-e2e": "0.0.0-e2e", "v10.20.30-rc.1": "10.20.30-rc.1",
		"v1.0.0-alpha.beta-2.0": "1.0.0-alpha.beta-2.0", "v1.0.0-0a": "1.0.0-0a",
	}
	for in, want := range good {
		got, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1.2.3", "v1.2", "v1.2.3.4", "v01.2.3", "v1.02.3", "v1.2.3-", "v1.2.3-rc..1",
		"v1.2.3-01", "v1.2.3+build", "v1.2.3-rc.1+build", "V1.2.3", "v1.2.3 ", "vx.y.z", "v1.2.3-rc_1", "dev"} {
		if got, err := ParseVersion(in); err == nil {
			t.Errorf("ParseVersion(%q) = %q, want an error", in, got)
		}
	}
}

func TestSumsRoundTripAndTamper(t *testing.T) {
	dir := t.TempDir()
	for n, c := range map[string]string{"b.tgz": "chart", "a_bin": "binary", "a_bin.cdx.json": "{}"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "image", "blobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteSums(dir); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, SumsFile))
	// sha256("binary"), sorted by name, the sha256sum format.
	if !strings.HasPrefix(string(b), "9a3a45d01531a20e89ac6ae10b0b0beb0492acd7216a368aa062d1a5fecaf9cd  a_bin\n") ||
		strings.Count(string(b), "\n") != 3 || strings.Contains(string(b), "image") {
		t.Errorf("SHA256SUMS:\n%s", b)
	}
	if n, err := VerifySums(dir); err != nil || n != 3 {
		t.Errorf("VerifySums = %d, %v; want 3 files", n, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.tgz"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifySums(dir); err == nil || !strings.Contains(err.Error(), "b.tgz") {
		t.Errorf("VerifySums after a change: %v, want an error naming b.tgz", err)
	}
}

// writeChart writes a chart archive as helm package does: entries stamped
// with mtime.
func writeChart(t *testing.T, path string, mtime time.Time) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.ModTime = mtime
	tw := tar.NewWriter(zw)
	for _, f := range []struct{ name, body string }{{"apportion/Chart.yaml", "name: apportion\n"}, {"apportion/values.yaml", "replicas: 2\n"}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: mtime, Uname: "me"}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNormalizeChartIsReproducible(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tgz"), filepath.Join(dir, "b.tgz")
	writeChart(t, a, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	writeChart(t, b, time.Date(2026, 2, 2, 2, 2, 2, 0, time.UTC))
	epoch := time.Unix(1700000000, 0)
	for _, p := range []string{a, b} {
		if err := NormalizeChart(p, epoch); err != nil {
			t.Fatal(err)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Fatal("two packagings of one chart differ after NormalizeChart")
	}
	zr, err := gzip.NewReader(bytes.NewReader(ab))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		names = append(names, h.Name+"="+string(body))
		if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Mode != 0o644 {
			t.Errorf("%s: mtime %s, uname %q, mode %o", h.Name, h.ModTime, h.Uname, h.Mode)
		}
	}
	if got := strings.Join(names, ","); got != "apportion/Chart.yaml=name: apportion\n,apportion/values.yaml=replicas: 2\n" {
		t.Errorf("entries changed: %q", got)
	}
}

func TestBinarySBOM(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(1700000000, 0)
	var first bytes.Buffer
	if err := WriteBinarySBOM(&first, bin, SBOMOptions{Version: "v1.2.3", Created: created}); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := WriteBinarySBOM(&again, bin, SBOMOptions{Version: "v1.2.3", Created: created}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Bytes(), again.Bytes()) {
		t.Error("two SBOMs of one binary differ")
	}
	var doc struct {
		BOMFormat, SpecVersion, SerialNumber string
		Metadata                             struct {
			Timestamp string
			Component struct {
				Type, Name, Version, Purl string
				Hashes                    []struct{ Alg, Content string }
			}
		}
		Components []struct{ Name, Version, Purl string }
	}
	if err := json.Unmarshal(first.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	mc := doc.Metadata.Component
	if doc.BOMFormat != "CycloneDX" || !strings.HasPrefix(doc.SerialNumber, "urn:uuid:") || doc.Metadata.Timestamp != "2023-11-14T22:13:20Z" {
		t.Errorf("header: %q %q %q", doc.BOMFormat, doc.SerialNumber, doc.Metadata.Timestamp)
	}
	if mc.Type != "application" || mc.Version != "v1.2.3" || mc.Purl != "pkg:golang/"+mc.Name+"@v1.2.3" ||
		len(mc.Hashes) != 1 || mc.Hashes[0].Alg != "SHA-256" || mc.Hashes[0].Content != sum {
		t.Errorf("main component %+v, want the binary's sha256 %s", mc, sum)
	}
	var std bool
	for _, c := range doc.Components {
		std = std || c.Purl == "pkg:golang/stdlib@"+runtime.Version()
	}
	if !std {
		t.Errorf("no Go standard library %s among %+v", runtime.Version(), doc.Components)
	}
	if _, err := BinarySBOM(filepath.Join(t.TempDir(), "missing"), SBOMOptions{Version: "v1.2.3"}); err == nil {
		t.Error("no error for a missing binary")
	}
}

func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	dir := t.TempDir()
	idx, err := random.Index(64, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := layout.Write(filepath.Join(dir, "image"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendIndex(idx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"apportion-1.2.3-rc.1.tgz", "apportion-crd-1.2.3-rc.1.tgz"} {
		if err := os.WriteFile(filepath.Join(dir, c), []byte("chart"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var helmCalls []string
	fakeHelm := func(_ context.Context, args ...string) ([]byte, error) {
		helmCalls = append(helmCalls, strings.Join(args, " "))
		return []byte("Pushed: x\nDigest: sha256:" + strings.Repeat("ab", 32) + "\n"), nil
	}
	p, err := Push(t.Context(), PushOptions{Dir: dir, Version: "v1.2.3-rc.1", Registry: host + "/team", Insecure: true, Helm: fakeHelm, Unsigned: true})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if p.ImageDigest != want || p.Image != host+"/team/apportion:1.2.3-rc.1" {
		t.Errorf("pushed %s@%s, want %s/team/apportion:1.2.3-rc.1@%s", p.Image, p.ImageDigest, host, want)
	}
	ref, _ := name.ParseReference(host + "/team/apportion:1.2.3-rc.1")
	desc, err := remote.Get(ref)
	if err != nil || desc.Digest != want {
		t.Errorf("the registry serves %v, %v; want %s", desc, err, want)
	}
	wantCalls := []string{
		"push " + filepath.Join(dir, "apportion-1.2.3-rc.1.tgz") + " oci://" + host + "/team/charts --plain-http",
		"push " + filepath.Join(dir, "apportion-crd-1.2.3-rc.1.tgz") + " oci://" + host + "/team/charts --plain-http",
	}
	if strings.Join(helmCalls, "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("helm calls:\n%s\nwant:\n%s", strings.Join(helmCalls, "\n"), strings.Join(wantCalls, "\n"))
	}
	if len(p.Charts) != 2 || p.Charts[1].Name != "apportion-crd" || p.Charts[0].Ref != "oci://"+host+"/team/charts/apportion" {
		t.Errorf("charts %+v", p.Charts)
	}
	if !strings.Contains(p.String(), "image "+host+"/team/apportion:1.2.3-rc.1@"+want.String()+"\n") {
		t.Errorf("printed:\n%s", p)
	}

	for _, bad := range []PushOptions{
		{Dir: dir, Version: "1.2.3", Registry: host, Helm: fakeHelm, Unsigned: true},
		{Dir: dir, Version: "v1.2.3-rc.1", Registry: "http://" + host, Helm: fakeHelm, Unsigned: true},
		{Dir: t.TempDir(), Version: "v1.2.3-rc.1", Registry: host, Helm: fakeHelm, Unsigned: true},
	} {
		if _, err := Push(t.Context(), bad); err == nil {
			t.Errorf("Push(%+v): no error", bad)
		}
	}
	noDigest := func(context.Context, ...string) ([]byte, error) { return []byte("Pushed: x\n"), nil }
	if _, err := Push(t.Context(), PushOptions{Dir: dir, Version: "v1.2.3-rc.1", Registry: host, Insecure: true, Helm: noDigest, Unsigned: true}); err == nil {
		t.Error("no error when helm printed no digest")
	}
}
