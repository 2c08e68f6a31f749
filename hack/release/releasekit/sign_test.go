package releasekit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
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

// signedRelease writes a release folder as make release does (image
// layout, two charts, two SBOMs, SHA256SUMS) and serves an empty registry.
func signedRelease(t *testing.T) (dir, host string, digest string) {
	t.Helper()
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
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
	for _, f := range []string{"apportion-1.2.3.tgz", "apportion-crd-1.2.3.tgz",
		"apportion_1.2.3_linux_amd64.cdx.json", "apportion_1.2.3_linux_arm64.cdx.json", "apportion_1.2.3_darwin_arm64.cdx.json"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteSums(dir); err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	return dir, u.Host, d.String()
}

func chartHelm(_ context.Context, args ...string) ([]byte, error) {
	// A digest per chart, as a registry gives.
	d := strings.Repeat("ab", 32)
	if strings.Contains(args[1], "-crd-") {
		d = strings.Repeat("cd", 32)
	}
	return []byte("Pushed: x\nDigest: sha256:" + d + "\n"), nil
}

func TestPushRefusesUnsigned(t *testing.T) {
	dir, host, _ := signedRelease(t)
	var helmCalls int
	helm := func(ctx context.Context, args ...string) ([]byte, error) {
		helmCalls++
		return chartHelm(ctx, args...)
	}
	for _, o := range []PushOptions{
		{Dir: dir, Version: "v1.2.3", Registry: host, Insecure: true, Helm: helm},
		{Dir: dir, Version: "v1.2.3", Registry: host, Insecure: true, Helm: helm, Sign: &SignOptions{Revision: "abc"}},
	} {
		if _, err := Push(t.Context(), o); !errors.Is(err, ErrUnsigned) {
			t.Errorf("Push without a key: %v, want ErrUnsigned", err)
		}
	}
	if !strings.Contains(ErrUnsigned.Error(), "UNSIGNED=1") || !strings.Contains(ErrUnsigned.Error(), "COSIGN_KEY") {
		t.Errorf("the message does not say what to set: %v", ErrUnsigned)
	}
	// Nothing reached the registry.
	ref, _ := name.ParseReference(host + "/apportion:1.2.3")
	if _, err := remote.Get(ref); err == nil {
		t.Error("the image was pushed although the push was refused")
	}
	if helmCalls != 0 {
		t.Errorf("helm push ran %d times although the push was refused", helmCalls)
	}
}

func TestPushSignsByDigest(t *testing.T) {
	dir, host, digest := signedRelease(t)
	var calls [][]string
	var provenance []byte
	cosign := func(_ context.Context, args ...string) ([]byte, error) {
		calls = append(calls, args)
		for i, a := range args {
			if a == "--type" && args[i+1] == ProvenanceAttestationType && provenance == nil {
				b, err := os.ReadFile(args[i+3])
				if err != nil {
					t.Errorf("the provenance predicate: %v", err)
				}
				provenance = b
			}
		}
		return nil, nil
	}
	s := &SignOptions{Key: "/keys/cosign.key", Revision: "0123abcd", SourceDateEpoch: time.Unix(1700000000, 0), Cosign: cosign}
	p, err := Push(t.Context(), PushOptions{Dir: dir, Version: "v1.2.3", Registry: host, Insecure: true, Helm: chartHelm, Sign: s})
	if err != nil {
		t.Fatal(err)
	}
	image := host + "/apportion@" + digest
	chart := host + "/charts/apportion@sha256:" + strings.Repeat("ab", 32)
	crd := host + "/charts/apportion-crd@sha256:" + strings.Repeat("cd", 32)
	common := " --key /keys/cosign.key --tlog-upload=false --yes --allow-http-registry "
	want := []string{
		"sign" + common + "--recursive " + image,
		"attest" + common + "--type cyclonedx --predicate " + filepath.Join(dir, "apportion_1.2.3_linux_amd64.cdx.json") + " " + image,
		"attest" + common + "--type cyclonedx --predicate " + filepath.Join(dir, "apportion_1.2.3_linux_arm64.cdx.json") + " " + image,
		"attest" + common + "--type slsaprovenance1 --predicate PROVENANCE " + image,
		"sign" + common + chart,
		"attest" + common + "--type slsaprovenance1 --predicate PROVENANCE " + chart,
		"sign" + common + crd,
		"attest" + common + "--type slsaprovenance1 --predicate PROVENANCE " + crd,
	}
	var got []string
	for _, c := range calls {
		for i, a := range c {
			if i > 0 && c[i-1] == "--predicate" && strings.HasSuffix(a, "provenance.json") {
				c[i] = "PROVENANCE"
			}
		}
		got = append(got, strings.Join(c, " "))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("cosign calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range got {
		if strings.Contains(c, ":1.2.3") {
			t.Errorf("cosign given a tag, not a digest: %s", c)
		}
	}
	if len(p.Signed) != 3 || p.Signed[0] != image || !strings.Contains(p.String(), "signed "+crd+"\n") {
		t.Errorf("signed %v; printed:\n%s", p.Signed, p)
	}
	var pred struct {
		BuildDefinition struct {
			ExternalParameters   map[string]string `json:"externalParameters"`
			InternalParameters   map[string]int64  `json:"internalParameters"`
			ResolvedDependencies []struct {
				Digest map[string]string `json:"digest"`
			} `json:"resolvedDependencies"`
		} `json:"buildDefinition"`
		RunDetails struct {
			Builder struct {
				ID string `json:"id"`
			} `json:"builder"`
			Metadata struct {
				StartedOn string `json:"startedOn"`
			} `json:"metadata"`
			Byproducts []struct {
				Name   string            `json:"name"`
				Digest map[string]string `json:"digest"`
			} `json:"byproducts"`
		} `json:"runDetails"`
	}
	if err := json.Unmarshal(provenance, &pred); err != nil {
		t.Fatalf("provenance %s: %v", provenance, err)
	}
	bd, rd := pred.BuildDefinition, pred.RunDetails
	if bd.ExternalParameters["version"] != "v1.2.3" || bd.InternalParameters["SOURCE_DATE_EPOCH"] != 1700000000 ||
		len(bd.ResolvedDependencies) != 1 || bd.ResolvedDependencies[0].Digest["gitCommit"] != "0123abcd" ||
		rd.Builder.ID != DefaultBuilderID || rd.Metadata.StartedOn != "2023-11-14T22:13:20Z" || len(rd.Byproducts) != 5 {
		t.Errorf("provenance: %s", provenance)
	}
}

func TestPushSignFailureSaysSo(t *testing.T) {
	dir, host, _ := signedRelease(t)
	failing := func(context.Context, ...string) ([]byte, error) {
		return []byte("Error: decrypt: wrong password"), errors.New("exit status 1")
	}
	s := &SignOptions{Key: "cosign.key", Revision: "abc", Cosign: failing}
	_, err := Push(t.Context(), PushOptions{Dir: dir, Version: "v1.2.3", Registry: host, Insecure: true, Helm: chartHelm, Sign: s})
	if err == nil || !strings.Contains(err.Error(), "wrong password") || !strings.Contains(err.Error(), "unsigned") {
		t.Errorf("Push with a failing cosign: %v", err)
	}
	// Without SBOMs there is nothing to attest: refused before the push.
	for _, f := range []string{"apportion_1.2.3_linux_amd64.cdx.json", "apportion_1.2.3_linux_arm64.cdx.json"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	ok := func(context.Context, ...string) ([]byte, error) { return nil, nil }
	s = &SignOptions{Key: "cosign.key", Revision: "abc", Cosign: ok}
	if _, err := Push(t.Context(), PushOptions{Dir: dir, Version: "v1.2.3", Registry: host + "/other", Insecure: true, Helm: chartHelm, Sign: s}); err == nil {
		t.Error("Push signed a release without SBOMs")
	}
	ref, _ := name.ParseReference(host + "/other/apportion:1.2.3")
	if _, err := remote.Get(ref); err == nil {
		t.Error("the image was pushed although the release had no SBOM to attest")
	}
}

func TestProvenanceStatementIsReproducible(t *testing.T) {
	dir, _, _ := signedRelease(t)
	o := SignOptions{Revision: "0123abcd", SourceDateEpoch: time.Unix(1700000000, 0)}
	subjects := []Subject{
		{Name: "r/charts/apportion@sha256:bb", Digest: map[string]string{"sha256": "bb"}},
		{Name: "r/apportion@sha256:aa", Digest: map[string]string{"sha256": "aa"}},
	}
	a, err := ProvenanceStatement(dir, "v1.2.3", o, subjects)
	if err != nil {
		t.Fatal(err)
	}
	// Another time, the subjects in another order: the same bytes.
	b, err := ProvenanceStatement(dir, "v1.2.3", o, []Subject{subjects[1], subjects[0]})
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("two statements of one release differ:\n%s\n%s", ja, jb)
	}
	if a.Subject[0].Name != "r/apportion@sha256:aa" || a.PredicateType != ProvenancePredicateType || a.Type != "https://in-toto.io/Statement/v1" {
		t.Errorf("statement %s", ja)
	}
	// Another revision is another provenance.
	o.Revision = "ffff"
	c, err := ProvenanceStatement(dir, "v1.2.3", o, subjects)
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Predicate) == string(a.Predicate) {
		t.Error("the revision does not change the provenance")
	}
	if _, err := ProvenanceStatement(t.TempDir(), "v1.2.3", o, subjects); err == nil {
		t.Error("a provenance for a folder without SHA256SUMS")
	}
}
