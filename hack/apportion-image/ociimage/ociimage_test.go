package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}
)

const desc = "Proportional, architecture-aware pod placement"

// created is a SOURCE_DATE_EPOCH: 2024-05-01T12:00:00Z.
var created = time.Unix(1714564800, 0).UTC()

func meta() Metadata {
	return Metadata{
		Version:     "v1.2.3",
		Revision:    "0123456789abcdef0123456789abcdef01234567",
		Source:      DefaultSource,
		Title:       "apportion",
		Description: desc,
		Created:     created,
	}
}

// fakeBinaries writes a few bytes per platform, different per platform.
func fakeBinaries(t *testing.T, ps ...v1.Platform) []Binary {
	t.Helper()
	dir := t.TempDir()
	var bins []Binary
	for _, p := range ps {
		path := filepath.Join(dir, strings.ReplaceAll(p.String(), "/", "-"))
		if err := os.WriteFile(path, []byte("#!fake apportion for "+p.String()+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, Binary{Platform: p, Path: path})
	}
	return bins
}

// testCABundle is a PEM bundle of one self-signed certificate.
func testCABundle(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "apportion test CA"},
		NotBefore:             created,
		NotAfter:              created.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func buildAndWrite(t *testing.T, bins []Binary, opts Options, ref string) string {
	t.Helper()
	idx, err := Build(bins, opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := WriteLayout(dir, idx, ref); err != nil {
		t.Fatalf("WriteLayout: %v", err)
	}
	return dir
}

// TestBuildWriteReadBack builds, writes the layout, reads it back with
// go-containerregistry's layout package and checks every field of every
// platform's config, the index and the file system.
func TestBuildWriteReadBack(t *testing.T) {
	ca := testCABundle(t)
	withLicense := meta()
	withLicense.Licenses = "Apache-2.0"
	noTitle := meta()
	noTitle.Title, noTitle.Description = "", ""

	wantLabels := map[string]string{
		"org.opencontainers.image.created":     "2024-05-01T12:00:00Z",
		"org.opencontainers.image.version":     "v1.2.3",
		"org.opencontainers.image.revision":    "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.source":      "https://github.com/apportion-dev/apportion",
		"org.opencontainers.image.title":       "apportion",
		"org.opencontainers.image.description": desc,
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(out, kv[i])
			} else {
				out[kv[i]] = kv[i+1]
			}
		}
		return out
	}
	const path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

	for _, tc := range []struct {
		name      string
		platforms []v1.Platform
		opts      Options
		ref       string
		labels    map[string]string
		env       []string
	}{
		{
			name:      "amd64 and arm64 with a CA bundle",
			platforms: []v1.Platform{amd64, arm64},
			opts:      Options{Metadata: meta(), CABundle: ca},
			ref:       "v1.2.3",
			labels:    wantLabels,
			env:       []string{path, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		},
		{
			name:      "arm64 and amd64 given in that order, no CA bundle",
			platforms: []v1.Platform{arm64, amd64},
			opts:      Options{Metadata: meta()},
			labels:    wantLabels,
			env:       []string{path},
		},
		{
			name:      "a license",
			platforms: []v1.Platform{amd64, arm64},
			opts:      Options{Metadata: withLicense, CABundle: ca},
			ref:       "latest",
			labels:    with(wantLabels, "org.opencontainers.image.licenses", "Apache-2.0"),
			env:       []string{path, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		},
		{
			name:      "no title or description, one platform",
			platforms: []v1.Platform{arm64},
			opts:      Options{Metadata: noTitle},
			labels:    with(wantLabels, "org.opencontainers.image.title", "", "org.opencontainers.image.description", ""),
			env:       []string{path},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bins := fakeBinaries(t, tc.platforms...)
			dir := buildAndWrite(t, bins, tc.opts, tc.ref)

			// The layout as go-containerregistry reads it.
			top, err := layout.ImageIndexFromPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			tm, err := top.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex {
				t.Fatalf("index.json manifests = %+v, want one OCI image index", tm.Manifests)
			}
			var wantRef map[string]string
			if tc.ref != "" {
				wantRef = map[string]string{"org.opencontainers.image.ref.name": tc.ref}
			}
			if got := tm.Manifests[0].Annotations; !reflect.DeepEqual(got, wantRef) {
				t.Errorf("index.json annotations = %v, want %v", got, wantRef)
			}
			idx, err := top.ImageIndex(tm.Manifests[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if im.MediaType != types.OCIImageIndex || im.SchemaVersion != 2 {
				t.Errorf("index media type %s schema %d", im.MediaType, im.SchemaVersion)
			}
			if !reflect.DeepEqual(im.Annotations, tc.labels) {
				t.Errorf("index annotations = %v, want %v", im.Annotations, tc.labels)
			}
			// The index is sorted by platform whatever the order of the binaries.
			want := slices.Clone(tc.platforms)
			slices.SortFunc(want, func(a, b v1.Platform) int { return strings.Compare(a.String(), b.String()) })
			if len(im.Manifests) != len(want) {
				t.Fatalf("%d manifests, want %d", len(im.Manifests), len(want))
			}
			for i, d := range im.Manifests {
				p := want[i]
				if d.Platform == nil || !reflect.DeepEqual(*d.Platform, p) {
					t.Errorf("manifest %d platform = %v, want %v", i, d.Platform, p)
				}
				if d.MediaType != types.OCIManifestSchema1 || d.ArtifactType != "" {
					t.Errorf("%s: descriptor media type %s artifactType %q", p, d.MediaType, d.ArtifactType)
				}
				img, err := idx.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				m, err := img.Manifest()
				if err != nil {
					t.Fatal(err)
				}
				if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
					t.Errorf("%s: manifest %s config %s, want OCI", p, m.MediaType, m.Config.MediaType)
				}
				if len(m.Layers) != 2 {
					t.Fatalf("%s: %d layers, want 2", p, len(m.Layers))
				}
				layers, err := img.Layers()
				if err != nil {
					t.Fatal(err)
				}
				var diffIDs []v1.Hash
				for j, l := range layers {
					if m.Layers[j].MediaType != types.OCILayer {
						t.Errorf("%s: layer %d media type %s", p, j, m.Layers[j].MediaType)
					}
					h, err := l.DiffID()
					if err != nil {
						t.Fatal(err)
					}
					diffIDs = append(diffIDs, h)
				}

				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				if !cf.Created.Time.Equal(created) {
					t.Errorf("%s: created %s, want %s", p, cf.Created.Time, created)
				}
				for _, h := range cf.History {
					if !h.Created.Time.Equal(created) {
						t.Errorf("%s: history created %s, want %s", p, h.Created.Time, created)
					}
				}
				got := *cf
				got.Created = v1.Time{}
				got.History = slices.Clone(cf.History)
				for j := range got.History {
					got.History[j].Created = v1.Time{}
				}
				caNote := ""
				if tc.opts.CABundle != nil {
					caNote = ", /etc/ssl/certs/ca-certificates.crt"
				}
				wantCF := v1.ConfigFile{
					Architecture: p.Architecture,
					OS:           "linux",
					Variant:      p.Variant,
					History: []v1.History{
						{CreatedBy: "apportion-image: /etc/passwd, /etc/group, /home/nonroot, /tmp" + caNote, Comment: "users root (0) and nonroot (65532)"},
						{CreatedBy: "apportion-image: /apportion (" + p.String() + ")"},
					},
					RootFS: v1.RootFS{Type: "layers", DiffIDs: diffIDs},
					Config: v1.Config{
						User:       "65532:65532",
						Entrypoint: []string{"/apportion", "webhook"},
						Env:        tc.env,
						WorkingDir: "/",
						Labels:     tc.labels,
					},
				}
				if !reflect.DeepEqual(got, wantCF) {
					t.Errorf("%s: config file\n got %+v\nwant %+v", p, got, wantCF)
				}
			}

			// The same through Describe, with the file system.
			d, err := Describe(dir)
			if err != nil {
				t.Fatalf("Describe: %v", err)
			}
			if d.IndexDigest != tm.Manifests[0].Digest || d.RefName != tc.ref {
				t.Errorf("Describe: index %s ref %q, want %s %q", d.IndexDigest, d.RefName, tm.Manifests[0].Digest, tc.ref)
			}
			if err := Verify(d, bins, tc.opts); err != nil {
				t.Errorf("Verify: %v", err)
			}
			for i, pi := range d.Platforms {
				if !reflect.DeepEqual(pi.Platform, want[i]) {
					t.Errorf("Describe platform %d = %v, want %v", i, pi.Platform, want[i])
				}
				if pi.Config.Config.User != "65532:65532" || !slices.Equal(pi.Config.Config.Entrypoint, []string{"/apportion", "webhook"}) {
					t.Errorf("%s: user %q entrypoint %q", pi.Platform, pi.Config.Config.User, pi.Config.Config.Entrypoint)
				}
				if pi.CompressedSize <= 0 {
					t.Errorf("%s: compressed size %d", pi.Platform, pi.CompressedSize)
				}
				bin := bins[slices.IndexFunc(bins, func(b Binary) bool { return b.Platform.String() == pi.Platform.String() })]
				content, err := os.ReadFile(bin.Path)
				if err != nil {
					t.Fatal(err)
				}
				wantFiles := []File{
					{Path: "/apportion", Mode: 0o755, Size: int64(len(content)), SHA256: hexSum(content)},
					{Path: "/etc", Mode: fs.ModeDir | 0o755},
					{Path: "/etc/group", Mode: 0o644, Size: int64(len(Group)), SHA256: hexSum([]byte(Group))},
					{Path: "/etc/passwd", Mode: 0o644, Size: int64(len(Passwd)), SHA256: hexSum([]byte(Passwd))},
				}
				if tc.opts.CABundle != nil {
					wantFiles = append(wantFiles,
						File{Path: "/etc/ssl", Mode: fs.ModeDir | 0o755},
						File{Path: "/etc/ssl/certs", Mode: fs.ModeDir | 0o755},
						File{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Size: int64(len(ca)), SHA256: hexSum(ca)},
					)
				}
				wantFiles = append(wantFiles,
					File{Path: "/home", Mode: fs.ModeDir | 0o755},
					File{Path: "/home/nonroot", Mode: fs.ModeDir | 0o700, UID: 65532, GID: 65532},
					File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
				)
				if !reflect.DeepEqual(pi.Files, wantFiles) {
					t.Errorf("%s: files\n got %+v\nwant %+v", pi.Platform, pi.Files, wantFiles)
				}
			}
		})
	}
}

// TestZeroCreatedIsEpoch: without a time, the image is from 1970 (as ko's
// images), never from the build's wall clock.
func TestZeroCreatedIsEpoch(t *testing.T) {
	m := meta()
	m.Created = time.Time{}
	bins := fakeBinaries(t, amd64)
	d, err := Describe(buildAndWrite(t, bins, Options{Metadata: m}, ""))
	if err != nil {
		t.Fatal(err)
	}
	c := d.Platforms[0].Config
	if !c.Created.Time.Equal(time.Unix(0, 0)) || c.Config.Labels[LabelCreated] != "1970-01-01T00:00:00Z" {
		t.Errorf("created %s, label %q", c.Created.Time, c.Config.Labels[LabelCreated])
	}
	if err := Verify(d, bins, Options{Metadata: m}); err != nil {
		t.Error(err)
	}
}

func TestPasswdAndGroup(t *testing.T) {
	for _, want := range []string{"root:x:0:0:", "nonroot:x:65532:65532:nonroot:/home/nonroot:"} {
		if !strings.Contains(Passwd, want) {
			t.Errorf("/etc/passwd lacks %q", want)
		}
	}
	for _, want := range []string{"root:x:0:", "nonroot:x:65532:"} {
		if !strings.Contains(Group, want) {
			t.Errorf("/etc/group lacks %q", want)
		}
	}
}

// readTree maps every file under dir to its content and mode.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out[rel+"/"] = fi.Mode().String()
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fi.Mode().String() + " " + hexSum(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReproducible: the same inputs give the same digest and the same bytes
// on disk (layout and archive), whatever the order of the binaries or their
// paths; a different time, binary or label gives another digest.
func TestReproducible(t *testing.T) {
	ca := testCABundle(t)
	opts := Options{Metadata: meta(), CABundle: ca}
	digest := func(bins []Binary, opts Options) v1.Hash {
		t.Helper()
		idx, err := Build(bins, opts)
		if err != nil {
			t.Fatal(err)
		}
		h, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a := fakeBinaries(t, amd64, arm64)
	b := fakeBinaries(t, arm64, amd64) // other paths, other order
	first, second := digest(a, opts), digest(b, opts)
	if first != second {
		t.Fatalf("two builds: %s and %s", first, second)
	}

	dirA, dirB := buildAndWrite(t, a, opts, "v1.2.3"), buildAndWrite(t, b, opts, "v1.2.3")
	treeA, treeB := readTree(t, dirA), readTree(t, dirB)
	if !reflect.DeepEqual(treeA, treeB) {
		t.Errorf("two layouts differ:\n%v\n%v", treeA, treeB)
	}
	for name, mode := range treeA {
		if want := "-rw-r--r--"; !strings.HasSuffix(name, "/") && !strings.HasPrefix(mode, want) {
			t.Errorf("%s: mode %s, want %s", name, mode, want)
		}
	}
	d, err := Describe(dirA)
	if err != nil {
		t.Fatal(err)
	}
	if d.IndexDigest != first {
		t.Errorf("layout index %s, built %s", d.IndexDigest, first)
	}
	tarA, tarB := filepath.Join(t.TempDir(), "a.tar"), filepath.Join(t.TempDir(), "b.tar")
	if err := WriteArchive(tarA, dirA, created); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(tarB, dirB, created); err != nil {
		t.Fatal(err)
	}
	ba, _ := os.ReadFile(tarA)
	bb, _ := os.ReadFile(tarB)
	if !bytes.Equal(ba, bb) || len(ba) == 0 {
		t.Errorf("two archives differ (%d and %d bytes)", len(ba), len(bb))
	}

	later := opts
	later.Created = created.Add(time.Second)
	otherVersion := opts
	otherVersion.Version = "v1.2.4"
	noCA := opts
	noCA.CABundle = nil
	changed := fakeBinaries(t, amd64, arm64)
	if err := os.WriteFile(changed[1].Path, []byte("another arm64 build"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]v1.Hash{
		"a second later":      digest(a, later),
		"another version":     digest(a, otherVersion),
		"no CA bundle":        digest(a, noCA),
		"another arm64 build": digest(changed, opts),
	} {
		if h == first {
			t.Errorf("%s: same digest %s", name, h)
		}
	}
}

func TestWriteArchive(t *testing.T) {
	dir := buildAndWrite(t, fakeBinaries(t, amd64, arm64), Options{Metadata: meta()}, "v1.2.3")
	out := filepath.Join(t.TempDir(), "sub", "image.tar")
	if err := WriteArchive(out, dir, created); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tree := readTree(t, dir)
	tr := tar.NewReader(f)
	seen := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen++
		if !h.ModTime.Equal(created) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: mtime %s owner %d:%d", h.Name, h.ModTime, h.Uid, h.Gid)
		}
		want, ok := tree[h.Name]
		if !ok {
			t.Errorf("archive has %s, the layout has not", h.Name)
			continue
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			if got := h.FileInfo().Mode().String() + " " + hexSum(b); got != want {
				t.Errorf("%s: %s, want %s", h.Name, got, want)
			}
		}
	}
	if seen != len(tree) {
		t.Errorf("archive has %d entries, layout %d", seen, len(tree))
	}
	if _, ok := tree["index.json"]; !ok {
		t.Error("no index.json")
	}
	if err := WriteArchive(filepath.Join(t.TempDir(), "x.tar"), t.TempDir(), created); err == nil {
		t.Error("WriteArchive of a directory that is no layout: no error")
	}
}

func TestWriteLayoutReplacesOnlyALayout(t *testing.T) {
	bins := fakeBinaries(t, amd64)
	idx, err := Build(bins, Options{Metadata: meta()})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()

	// An earlier layout, with a stale blob, is replaced whole.
	dir := filepath.Join(root, "image")
	if err := WriteLayout(dir, idx, ""); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "blobs", "sha256", "stale")
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, idx, "v1"); err != nil {
		t.Fatalf("replace a layout: %v", err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale blob survived: %v", err)
	}

	// A trailing slash is the same directory.
	if err := WriteLayout(dir+"/", idx, "v2"); err != nil {
		t.Errorf("with a trailing slash: %v", err)
	}
	if d, err := Describe(dir); err != nil || d.RefName != "v2" {
		t.Errorf("after a trailing slash: %v", err)
	}

	// An empty directory is fine.
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(empty, idx, ""); err != nil {
		t.Errorf("empty directory: %v", err)
	}

	// Anything else is left alone.
	other := filepath.Join(root, "other")
	keep := filepath.Join(other, "keep.txt")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{other, file} {
		if err := WriteLayout(d, idx, ""); err == nil {
			t.Errorf("WriteLayout(%s): no error", d)
		}
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
		t.Errorf("keep.txt = %q, %v", b, err)
	}
	if err := WriteLayout(filepath.Join(root, "bad-ref"), idx, "not a tag"); err == nil {
		t.Error("ref name with spaces: no error")
	}
	// No temporary directories left behind.
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".ociimage-") {
			t.Errorf("left %s", e.Name())
		}
	}
}

func TestBuildErrors(t *testing.T) {
	bins := fakeBinaries(t, amd64, arm64)
	noVersion := meta()
	noVersion.Version = " "
	noSource := meta()
	noSource.Source = ""
	beforeEpoch := meta()
	beforeEpoch.Created = time.Unix(-1, 0)
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		bins []Binary
		opts Options
		want string
	}{
		{"no binary", nil, Options{Metadata: meta()}, "no binary"},
		{"two for one platform", []Binary{bins[0], {Platform: amd64, Path: bins[1].Path}}, Options{Metadata: meta()}, "two binaries for linux/amd64"},
		{"no version", bins, Options{Metadata: noVersion}, "version must not be empty"},
		{"no source", bins, Options{Metadata: noSource}, "source must not be empty"},
		{"before the epoch", bins, Options{Metadata: beforeEpoch}, "before the Unix epoch"},
		{"missing binary", []Binary{{Platform: amd64, Path: filepath.Join(t.TempDir(), "nope")}}, Options{Metadata: meta()}, "no such file"},
		{"empty binary", []Binary{{Platform: amd64, Path: empty}}, Options{Metadata: meta()}, "is empty"},
		{"not linux", []Binary{{Platform: v1.Platform{OS: "windows", Architecture: "amd64"}, Path: bins[0].Path}}, Options{Metadata: meta()}, "want linux/ARCH"},
		{"CA bundle without certificates", bins, Options{Metadata: meta(), CABundle: []byte("not PEM")}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.bins, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestVerifyCatches: Verify fails a layout that does not match the inputs.
func TestVerifyCatches(t *testing.T) {
	ca := testCABundle(t)
	bins := fakeBinaries(t, amd64, arm64)
	opts := Options{Metadata: meta(), CABundle: ca}
	d, err := Describe(buildAndWrite(t, bins, opts, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(d, bins, opts); err != nil {
		t.Fatalf("Verify of a good layout: %v", err)
	}
	otherVersion := opts
	otherVersion.Version = "v9"
	noCA := opts
	noCA.CABundle = nil
	changed := fakeBinaries(t, amd64, arm64)
	if err := os.WriteFile(changed[0].Path, []byte("rebuilt"), 0o755); err != nil {
		t.Fatal(err)
	}
	s390x := fakeBinaries(t, amd64, arm64, v1.Platform{OS: "linux", Architecture: "s390x"})
	for _, tc := range []struct {
		name string
		bins []Binary
		opts Options
		want string
	}{
		{"other labels", bins, otherVersion, "labels"},
		{"no CA bundle wanted", bins, noCA, "want none"},
		{"another binary", changed, opts, "/apportion has sha256"},
		{"a platform missing", s390x, opts, "no image for linux/s390x"},
		{"a platform too many", bins[:1], opts, "unexpected image for linux/arm64/v8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(d, tc.bins, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify: %v, want an error with %q", err, tc.want)
			}
		})
	}

	// A tampered user in the description.
	bad := *d
	bad.Platforms = slices.Clone(d.Platforms)
	bad.Platforms[0].Config.Config.User = "0:0"
	if err := Verify(&bad, bins, opts); err == nil || !strings.Contains(err.Error(), `user "0:0"`) {
		t.Errorf("Verify with root user: %v", err)
	}
}

func TestDescribeRejects(t *testing.T) {
	if _, err := Describe(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not an OCI image layout") {
		t.Errorf("empty directory: %v", err)
	}
	// A corrupt blob fails validation.
	dir := buildAndWrite(t, fakeBinaries(t, amd64), Options{Metadata: meta()}, "")
	d, err := Describe(dir)
	if err != nil {
		t.Fatal(err)
	}
	manifest := d.Platforms[0].Digest.Hex
	if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", manifest), []byte(`{"schemaVersion":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Describe(dir); err == nil {
		t.Error("Describe of a layout with a corrupt manifest: no error")
	}
}

func TestParsePlatform(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want v1.Platform
		err  string
	}{
		{in: "linux/amd64", want: amd64},
		{in: "linux/arm64", want: arm64},
		{in: "linux/arm64/v8", want: arm64},
		{in: "linux/arm/v7", want: v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}},
		{in: "linux/s390x", want: v1.Platform{OS: "linux", Architecture: "s390x"}},
		{in: "darwin/arm64", err: "the OS must be linux"},
		{in: "linux/x86_64", err: "unknown architecture"},
		{in: "linux", err: "want linux/ARCH"},
		{in: "linux//v8", err: "want linux/ARCH"},
		{in: "linux/arm64/v8/x", err: "want linux/ARCH"},
	} {
		got, err := ParsePlatform(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParsePlatform(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePlatform(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestRefName(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":                 "v1.2.3",
		"b96bdfd-dirty":          "b96bdfd-dirty",
		"v1.0.0+build":           "",
		"-x":                     "",
		"":                       "",
		strings.Repeat("a", 129): "",
	} {
		if got := RefName(in); got != want {
			t.Errorf("RefName(%q) = %q, want %q", in, got, want)
		}
	}
}

// fakeELF is the smallest ELF64 executable header debug/elf reads, for
// machine m: one PT_LOAD, and a PT_INTERP naming interp when not empty.
func fakeELF(t *testing.T, m elf.Machine, interp string) string {
	t.Helper()
	var progs []elf.Prog64
	const hdr, phsize = 64, 56
	if interp != "" {
		progs = append(progs, elf.Prog64{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R), Filesz: uint64(len(interp) + 1), Memsz: uint64(len(interp) + 1), Align: 1})
	}
	progs = append(progs, elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Align: 0x1000})
	dataOff := uint64(hdr + phsize*len(progs))
	if interp != "" {
		progs[0].Off = dataOff
	}
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT),
		Phoff: hdr, Ehsize: hdr, Phentsize: phsize, Phnum: uint16(len(progs)), Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		if err := binary.Write(&b, binary.LittleEndian, p); err != nil {
			t.Fatal(err)
		}
	}
	if interp != "" {
		b.WriteString(interp + "\x00")
	}
	path := filepath.Join(t.TempDir(), "elf")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckBinary(t *testing.T) {
	static86 := fakeELF(t, elf.EM_X86_64, "")
	staticArm := fakeELF(t, elf.EM_AARCH64, "")
	dynamic := fakeELF(t, elf.EM_X86_64, "/lib64/ld-linux-x86-64.so.2")
	script := fakeBinaries(t, amd64)[0].Path
	for _, tc := range []struct {
		name string
		path string
		p    v1.Platform
		err  string
	}{
		{"static amd64", static86, amd64, ""},
		{"static arm64", staticArm, arm64, ""},
		{"amd64 given as arm64", static86, arm64, "is a EM_X86_64 binary, not linux/arm64/v8"},
		{"arm64 given as amd64", staticArm, amd64, "is a EM_AARCH64 binary, not linux/amd64"},
		{"dynamic", dynamic, amd64, `dynamically linked (interpreter "/lib64/ld-linux-x86-64.so.2")`},
		{"not ELF", script, amd64, "not an ELF executable"},
		{"missing", filepath.Join(t.TempDir(), "nope"), amd64, "no such file"},
		{"unknown arch", static86, v1.Platform{OS: "linux", Architecture: "mips"}, "no ELF check"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckBinary(tc.path, tc.p)
			if tc.err == "" {
				if err != nil {
					t.Errorf("CheckBinary: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("CheckBinary: %v, want an error with %q", err, tc.err)
			}
		})
	}
	// The test binary itself is an ELF of this machine's architecture (on
	// Linux amd64/arm64): the check reads real binaries too.
	if exe, err := os.Executable(); err == nil {
		if f, err := elf.Open(exe); err == nil {
			m := f.Machine
			f.Close()
			for arch, want := range elfMachines {
				if want == m {
					err := CheckBinary(exe, v1.Platform{OS: "linux", Architecture: arch})
					if err != nil && !strings.Contains(err.Error(), "dynamically linked") {
						t.Errorf("CheckBinary(test binary, %s): %v", arch, err)
					}
				}
			}
		}
	}
}
