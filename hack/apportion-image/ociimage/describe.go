package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// Description is what an OCI image layout holds, read back from disk.
type Description struct {
	// IndexDigest and IndexMediaType are those of the image index that
	// index.json names.
	IndexDigest    v1.Hash
	IndexMediaType types.MediaType
	// RefName is the index's org.opencontainers.image.ref.name in index.json.
	RefName string
	// Annotations are the image index's own annotations.
	Annotations map[string]string
	// Platforms are the index's images, in the index's order.
	Platforms []PlatformImage
}

// PlatformImage describes one image of the index.
type PlatformImage struct {
	// Platform is the platform the index gives the image.
	Platform v1.Platform
	// Digest and MediaType are those of the image manifest.
	Digest    v1.Hash
	MediaType types.MediaType
	// ArtifactType is the descriptor's artifactType in the index ("" for an
	// image).
	ArtifactType string
	// Config is the image's config file: OS, Architecture, Variant, Created,
	// History, RootFS and Config (User, Entrypoint, Env, WorkingDir, Labels).
	Config          v1.ConfigFile
	ConfigMediaType types.MediaType
	LayerMediaTypes []types.MediaType
	// CompressedSize is the size of the compressed layers: what a pull
	// downloads besides the (small) manifest and config.
	CompressedSize int64
	// Files is the image's file system with every layer applied: each path
	// once, as the top-most layer that has it gives it, top layer first.
	Files []File
}

// File is one entry of an image's file system.
type File struct {
	Path     string // absolute
	Mode     fs.FileMode
	UID, GID int
	Size     int64
	SHA256   string // hex, regular files only
}

// File returns the entry at the absolute path p.
func (pi PlatformImage) File(p string) (File, bool) {
	for _, f := range pi.Files {
		if f.Path == p {
			return f, true
		}
	}
	return File{}, false
}

// Describe reads the OCI image layout dir: index.json must name exactly one
// image index. It validates every blob (digests, sizes, layer diff IDs and
// the platforms against the configs) with go-containerregistry's validate
// package, then describes each image.
func Describe(dir string) (*Description, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read %s/index.json: %w", dir, err)
	}
	if len(tm.Manifests) != 1 || !tm.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("%s/index.json: want exactly one image index, got %d entries", dir, len(tm.Manifests))
	}
	td := tm.Manifests[0]
	idx, err := top.ImageIndex(td.Digest)
	if err != nil {
		return nil, fmt.Errorf("read index %s: %w", td.Digest, err)
	}
	if err := validate.Index(idx); err != nil {
		return nil, fmt.Errorf("%s is not a valid image index: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	d := &Description{
		IndexDigest:    td.Digest,
		IndexMediaType: td.MediaType,
		RefName:        td.Annotations[AnnotationRefName],
		Annotations:    im.Annotations,
	}
	for _, desc := range im.Manifests {
		if !desc.MediaType.IsImage() {
			return nil, fmt.Errorf("index entry %s is a %s, not an image", desc.Digest, desc.MediaType)
		}
		if desc.Platform == nil {
			return nil, fmt.Errorf("index entry %s has no platform", desc.Digest)
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, err
		}
		pi, err := describeImage(img)
		if err != nil {
			return nil, fmt.Errorf("image %s (%s): %w", desc.Digest, desc.Platform, err)
		}
		pi.Platform = *desc.Platform
		pi.Digest = desc.Digest
		pi.ArtifactType = desc.ArtifactType
		d.Platforms = append(d.Platforms, pi)
	}
	return d, nil
}

func describeImage(img v1.Image) (PlatformImage, error) {
	var pi PlatformImage
	m, err := img.Manifest()
	if err != nil {
		return pi, err
	}
	pi.MediaType = m.MediaType
	pi.ConfigMediaType = m.Config.MediaType
	cf, err := img.ConfigFile()
	if err != nil {
		return pi, err
	}
	pi.Config = *cf
	for _, l := range m.Layers {
		pi.LayerMediaTypes = append(pi.LayerMediaTypes, l.MediaType)
		pi.CompressedSize += l.Size
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return pi, fmt.Errorf("read the file system: %w", err)
		}
		f := File{Path: cleanName(h.Name), Mode: h.FileInfo().Mode(), UID: h.Uid, GID: h.Gid, Size: h.Size}
		if h.Typeflag == tar.TypeReg {
			s := sha256.New()
			if _, err := io.Copy(s, tr); err != nil {
				return pi, fmt.Errorf("read %s: %w", f.Path, err)
			}
			f.SHA256 = hex.EncodeToString(s.Sum(nil))
		}
		pi.Files = append(pi.Files, f)
	}
	return pi, nil
}

// Verify checks that d is what Build(bins, opts) should have written: one
// image per binary, each with its platform in the index and the config, the
// OCI media types, the nonroot user, the entrypoint, the environment, the
// labels, the creation time, the binary byte for byte at BinaryPath (root,
// 0755), the users, /tmp (1777) and the CA bundle when opts has one.
func Verify(d *Description, bins []Binary, opts Options) error {
	v := &verifier{opts: opts, labels: Labels(opts.Metadata)}
	if opts.CABundle != nil {
		v.caSum = sum(opts.CABundle)
	}
	v.index(d, bins)
	for _, pi := range d.Platforms {
		p := pi.Platform.String()
		i := slices.IndexFunc(bins, func(b Binary) bool { return b.Platform.String() == p })
		if i < 0 {
			v.fail("unexpected image for %s", p)
			continue
		}
		v.manifest(p, pi)
		v.config(p, pi.Config)
		v.files(p, pi, bins[i].Path)
	}
	return errors.Join(v.errs...)
}

// verifier collects every mismatch Verify finds rather than stopping at the
// first, so that one run shows all that is wrong with a layout.
type verifier struct {
	opts   Options
	labels map[string]string
	caSum  string // "" without a CA bundle
	errs   []error
}

func (v *verifier) fail(format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf(format, args...))
}

// index checks the image index: its media type, its annotations and one
// image per binary.
func (v *verifier) index(d *Description, bins []Binary) {
	if d.IndexMediaType != types.OCIImageIndex {
		v.fail("index media type %s, want %s", d.IndexMediaType, types.OCIImageIndex)
	}
	if !maps.Equal(d.Annotations, v.labels) {
		v.fail("index annotations %v, want %v", d.Annotations, v.labels)
	}
	seen := map[string]bool{}
	for _, pi := range d.Platforms {
		seen[pi.Platform.String()] = true
	}
	for _, b := range bins {
		if !seen[b.Platform.String()] {
			v.fail("no image for %s", b.Platform)
		}
	}
	if len(d.Platforms) != len(bins) {
		v.fail("%d images, want %d", len(d.Platforms), len(bins))
	}
}

// manifest checks that the index and the config agree on the platform p and
// that the image is plain OCI: no artifactType, OCI media types throughout.
func (v *verifier) manifest(p string, pi PlatformImage) {
	c := pi.Config
	if got := (v1.Platform{OS: c.OS, Architecture: c.Architecture, Variant: c.Variant}); got.String() != p {
		v.fail("%s: the config says %s", p, got)
	}
	if pi.ArtifactType != "" {
		v.fail("%s: the index gives it the artifactType %q, want none", p, pi.ArtifactType)
	}
	if pi.MediaType != types.OCIManifestSchema1 || pi.ConfigMediaType != types.OCIConfigJSON {
		v.fail("%s: media types %s / %s, want OCI", p, pi.MediaType, pi.ConfigMediaType)
	}
	for _, mt := range pi.LayerMediaTypes {
		if mt != types.OCILayer {
			v.fail("%s: layer media type %s, want %s", p, mt, types.OCILayer)
		}
	}
}

// config checks how the image runs: user, entrypoint, environment, working
// directory, labels and creation time.
func (v *verifier) config(p string, c v1.ConfigFile) {
	if c.Config.User != User {
		v.fail("%s: user %q, want %q", p, c.Config.User, User)
	}
	if !slices.Equal(c.Config.Entrypoint, Entrypoint()) || len(c.Config.Cmd) != 0 {
		v.fail("%s: entrypoint %q cmd %q, want entrypoint %q and no cmd", p, c.Config.Entrypoint, c.Config.Cmd, Entrypoint())
	}
	if want := Env(v.opts.CABundle != nil); !slices.Equal(c.Config.Env, want) {
		v.fail("%s: env %q, want %q", p, c.Config.Env, want)
	}
	if c.Config.WorkingDir != WorkingDir {
		v.fail("%s: working dir %q, want %q", p, c.Config.WorkingDir, WorkingDir)
	}
	if !maps.Equal(c.Config.Labels, v.labels) {
		v.fail("%s: labels %v, want %v", p, c.Config.Labels, v.labels)
	}
	if !c.Created.Time.Equal(v.opts.created()) {
		v.fail("%s: created %s, want %s", p, c.Created.Time, v.opts.created())
	}
}

// files checks the image's file system against what Build writes: the
// binary at binPath byte for byte, the users, the home folder, /tmp and the
// CA bundle exactly when there is one.
func (v *verifier) files(p string, pi PlatformImage, binPath string) {
	binSum, err := sumFile(binPath)
	if err != nil {
		v.fail("%s: %w", p, err)
	}
	want := []File{
		{Path: BinaryPath, Mode: 0o755, SHA256: binSum},
		{Path: "/etc/passwd", Mode: 0o644, SHA256: sum([]byte(Passwd))},
		{Path: "/etc/group", Mode: 0o644, SHA256: sum([]byte(Group))},
		{Path: "/home/nonroot", Mode: fs.ModeDir | 0o700, UID: UID, GID: GID},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
	if v.caSum != "" {
		want = append(want, File{Path: CABundlePath, Mode: 0o644, SHA256: v.caSum})
	} else if _, ok := pi.File(CABundlePath); ok {
		v.fail("%s: has %s, want none", p, CABundlePath)
	}
	for _, w := range want {
		f, ok := pi.File(w.Path)
		if !ok {
			v.fail("%s: no %s", p, w.Path)
			continue
		}
		if f.Mode != w.Mode || f.UID != w.UID || f.GID != w.GID {
			v.fail("%s: %s is %s %d:%d, want %s %d:%d", p, w.Path, f.Mode, f.UID, f.GID, w.Mode, w.UID, w.GID)
		}
		if w.SHA256 != "" && f.SHA256 != w.SHA256 {
			v.fail("%s: %s has sha256 %s, want %s", p, w.Path, f.SHA256, w.SHA256)
		}
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func sumFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := sha256.New()
	if _, err := io.Copy(s, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(s.Sum(nil)), nil
}

// elfMachines maps GOARCH to the ELF machine of its binaries.
var elfMachines = map[string]elf.Machine{
	"386":     elf.EM_386,
	"amd64":   elf.EM_X86_64,
	"arm":     elf.EM_ARM,
	"arm64":   elf.EM_AARCH64,
	"ppc64le": elf.EM_PPC64,
	"riscv64": elf.EM_RISCV,
	"s390x":   elf.EM_S390,
}

// CheckBinary reports whether path is a statically linked Linux ELF
// executable for platform p: the image has no libc or dynamic loader, and a
// binary of the wrong architecture would only fail once a node runs it.
func CheckBinary(path string, p v1.Platform) error {
	want, ok := elfMachines[p.Architecture]
	if !ok || p.OS != "linux" {
		return fmt.Errorf("%s: no ELF check for platform %s", path, p)
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("%s is a %s binary, not %s (%s)", path, f.Machine, p, want)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s is an ELF %s, not an executable", path, f.Type)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(io.LimitReader(prog.Open(), 256))
			return fmt.Errorf("%s is dynamically linked (interpreter %q); build it with CGO_ENABLED=0", path, string(trimNUL(interp)))
		}
	}
	return nil
}

func trimNUL(b []byte) []byte {
	if i := slices.Index(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
