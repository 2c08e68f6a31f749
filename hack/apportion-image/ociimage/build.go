// Package ociimage builds apportion's container image without a container
// engine: the static binary on an empty base (crane/ko style), one image per
// platform, assembled into an image index and written as an OCI image layout
// directory. It also reads a layout back and describes (and checks) each
// platform, so a build can prove what it wrote.
//
// The image has two layers. The first is the same for every platform:
// /etc/passwd and /etc/group with root (0) and nonroot (65532), /home/nonroot,
// an empty /tmp (mode 1777) and, when given, the CA bundle at
// /etc/ssl/certs/ca-certificates.crt. The second holds /apportion (root-owned,
// mode 0755). Every timestamp is Metadata.Created, so the same inputs give the
// same digests.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The fixed parts of the image.
const (
	// BinaryPath is where the binary lives in the image.
	BinaryPath = "/apportion"
	// CABundlePath is where the CA bundle lives in the image.
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	// UID and GID of the nonroot user the image runs as.
	UID = 65532
	GID = 65532
	// User is the config's User field.
	User = "65532:65532"
	// WorkingDir is the config's WorkingDir field.
	WorkingDir = "/"
	// PATH is the PATH in the config's Env (the one distroless uses).
	PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

	// DefaultSource is the repository the image's source label names.
	DefaultSource = "https://github.com/apportion-dev/apportion"
	// DefaultTitle and DefaultDescription are the title and description labels
	// the command uses unless told otherwise.
	DefaultTitle       = "apportion"
	DefaultDescription = "Proportional, architecture-aware pod placement for Kubernetes clusters that run Karpenter: admission webhook and controllers"
)

// The OCI annotation (and label) keys the image sets.
const (
	LabelCreated     = "org.opencontainers.image.created"
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelSource      = "org.opencontainers.image.source"
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	LabelLicenses    = "org.opencontainers.image.licenses"
	// AnnotationRefName names the index in the layout's index.json (its "tag").
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Entrypoint is the config's Entrypoint: the admission webhook and controllers.
func Entrypoint() []string { return []string{BinaryPath, "webhook"} }

// Env is the config's Env: PATH and, with a CA bundle, SSL_CERT_FILE.
func Env(withCABundle bool) []string {
	env := []string{"PATH=" + PATH}
	if withCABundle {
		env = append(env, "SSL_CERT_FILE="+CABundlePath)
	}
	return env
}

// Metadata describes the build; it becomes the image's labels and the index's
// annotations.
type Metadata struct {
	Version     string // required
	Revision    string // required: the git commit
	Source      string // required: the source repository URL
	Title       string // optional
	Description string // optional
	Licenses    string // optional: an SPDX expression; empty when the repository has no license
	// Created is the time of every config, history entry and file in the
	// image (SOURCE_DATE_EPOCH or the commit time); the zero time means the
	// Unix epoch.
	Created time.Time
}

// created is the time the image records, in whole seconds, UTC.
func (m Metadata) created() time.Time {
	if m.Created.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return m.Created.UTC().Truncate(time.Second)
}

// Labels are the config labels (and the index annotations) for m: the OCI
// keys with a non-empty value.
func Labels(m Metadata) map[string]string {
	l := map[string]string{LabelCreated: m.created().Format(time.RFC3339)}
	for k, v := range map[string]string{
		LabelVersion:     m.Version,
		LabelRevision:    m.Revision,
		LabelSource:      m.Source,
		LabelTitle:       m.Title,
		LabelDescription: m.Description,
		LabelLicenses:    m.Licenses,
	} {
		if v != "" {
			l[k] = v
		}
	}
	return l
}

func (m Metadata) validate() error {
	var errs []error
	for _, f := range []struct{ name, v string }{{"version", m.Version}, {"revision", m.Revision}, {"source", m.Source}} {
		if strings.TrimSpace(f.v) == "" {
			errs = append(errs, fmt.Errorf("the %s must not be empty", f.name))
		}
	}
	if !m.Created.IsZero() && m.Created.Before(time.Unix(0, 0)) {
		errs = append(errs, fmt.Errorf("the creation time %s is before the Unix epoch", m.Created))
	}
	return errors.Join(errs...)
}

// Options configure a build.
type Options struct {
	Metadata
	// CABundle is the PEM CA bundle to put at CABundlePath; nil for none.
	CABundle []byte
}

// Binary is one platform's static binary.
type Binary struct {
	Platform v1.Platform
	Path     string
}

// goarchs are the architectures ParsePlatform accepts (GOARCH names).
var goarchs = []string{"386", "amd64", "arm", "arm64", "ppc64le", "riscv64", "s390x"}

// ParsePlatform parses "linux/ARCH" or "linux/ARCH/VARIANT". The OS must be
// linux and ARCH a GOARCH; arm64 gets the conventional variant v8 when none
// is given.
func ParsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || slices.Contains(parts, "") {
		return v1.Platform{}, fmt.Errorf("platform %q: want linux/ARCH or linux/ARCH/VARIANT", s)
	}
	if parts[0] != "linux" {
		return v1.Platform{}, fmt.Errorf("platform %q: the OS must be linux", s)
	}
	if !slices.Contains(goarchs, parts[1]) {
		return v1.Platform{}, fmt.Errorf("platform %q: unknown architecture %q (want one of %s)", s, parts[1], strings.Join(goarchs, ", "))
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	} else if p.Architecture == "arm64" {
		p.Variant = "v8"
	}
	return p, nil
}

// CheckCABundle reports whether b is a PEM bundle with at least one
// certificate.
func CheckCABundle(b []byte) error {
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return errors.New("no PEM certificate in the CA bundle")
	}
	return nil
}

// Build builds one image per binary and the image index that holds them,
// sorted by platform so the order of bins does not change the digest.
func Build(bins []Binary, opts Options) (v1.ImageIndex, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if len(bins) == 0 {
		return nil, errors.New("no binary to build an image of")
	}
	bins = slices.Clone(bins)
	slices.SortFunc(bins, func(a, b Binary) int { return strings.Compare(a.Platform.String(), b.Platform.String()) })
	for i := 1; i < len(bins); i++ {
		if bins[i].Platform.String() == bins[i-1].Platform.String() {
			return nil, fmt.Errorf("two binaries for %s", bins[i].Platform)
		}
	}
	base, err := BaseLayer(opts)
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.IndexAddendum, 0, len(bins))
	for _, b := range bins {
		img, err := Image(base, b, opts)
		if err != nil {
			return nil, err
		}
		p := b.Platform
		adds = append(adds, mutate.IndexAddendum{Add: plainImage{img}, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)
	return mutate.Annotations(idx, Labels(opts.Metadata)).(v1.ImageIndex), nil
}

// plainImage keeps go-containerregistry from giving the image's descriptor in
// the index an artifactType (it copies the config media type there): the OCI
// spec has that field for artifacts, and docker and buildx leave it out for
// images.
type plainImage struct{ v1.Image }

func (plainImage) ArtifactType() (string, error) { return "", nil }

// Image builds the image of one platform: base (BaseLayer) and the binary.
func Image(base v1.Layer, b Binary, opts Options) (v1.Image, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if b.Platform.OS != "linux" || b.Platform.Architecture == "" {
		return nil, fmt.Errorf("platform %q: want linux/ARCH", b.Platform.String())
	}
	bin, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, fmt.Errorf("%s binary: %w", b.Platform, err)
	}
	if len(bin) == 0 {
		return nil, fmt.Errorf("%s binary %s is empty", b.Platform, b.Path)
	}
	created := opts.created()
	binLayer, err := layer(created, []entry{{name: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image,
		mutate.Addendum{Layer: base, History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "apportion-image: /etc/passwd, /etc/group, /home/nonroot, /tmp" + caNote(opts.CABundle),
			Comment:   "users root (0) and nonroot (65532)",
		}},
		mutate.Addendum{Layer: binLayer, History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "apportion-image: " + BinaryPath + " (" + b.Platform.String() + ")",
		}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = b.Platform.Architecture
	cf.OS = b.Platform.OS
	cf.Variant = b.Platform.Variant
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: Entrypoint(),
		Env:        Env(opts.CABundle != nil),
		WorkingDir: WorkingDir,
		Labels:     Labels(opts.Metadata),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	return mutate.ConfigMediaType(img, types.OCIConfigJSON), nil
}

func caNote(ca []byte) string {
	if ca == nil {
		return ""
	}
	return ", " + CABundlePath
}

// Passwd and Group are the image's /etc/passwd and /etc/group.
const (
	Passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	Group  = "root:x:0:\nnonroot:x:65532:\n"
)

// BaseLayer is the layer every platform shares: the users, /tmp and the CA
// bundle.
func BaseLayer(opts Options) (v1.Layer, error) {
	if opts.CABundle != nil {
		if err := CheckCABundle(opts.CABundle); err != nil {
			return nil, err
		}
	}
	es := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(Group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(Passwd)},
	}
	if opts.CABundle != nil {
		es = append(es,
			entry{name: "etc/ssl/", mode: 0o755, dir: true},
			entry{name: "etc/ssl/certs/", mode: 0o755, dir: true},
			entry{name: strings.TrimPrefix(CABundlePath, "/"), mode: 0o644, data: opts.CABundle},
		)
	}
	es = append(es,
		entry{name: "home/", mode: 0o755, dir: true},
		entry{name: "home/nonroot/", mode: 0o700, dir: true, uid: UID, gid: GID},
		entry{name: "tmp/", mode: 0o1777, dir: true},
	)
	return layer(opts.created(), es)
}

type entry struct {
	name     string
	mode     int64
	dir      bool
	uid, gid int
	data     []byte
}

// layer is a gzipped tar of es, every timestamp mt. It compresses once here
// (gzip with a zero header time is deterministic) and hands the compressed
// bytes to go-containerregistry, which then neither recompresses nor depends
// on its own compression settings.
func layer(mt time.Time, es []entry) (v1.Layer, error) {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, e := range es {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mt,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tb.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	blob := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// validRefName reports whether s can name the index in index.json: the
// grammar of a tag.
func validRefName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || i > 0 && (c == '.' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

// RefName is the ref.name the layout gives the index for a version: the
// version itself when it is a valid tag, else "" (none).
func RefName(version string) string {
	if validRefName(version) {
		return version
	}
	return ""
}

// cleanName is a tar entry's name as an absolute path.
func cleanName(n string) string { return path.Clean("/" + n) }
