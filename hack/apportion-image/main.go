// Command apportion-image writes apportion's multi-arch container image as an
// OCI image layout, without a container engine (see ./ociimage), then reads
// the layout back, checks it and prints one line per platform. `make image`
// runs it on the binaries it cross-compiles. It is build tooling, kept under
// hack/ because nothing of it runs in a cluster.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/apportion-dev/apportion/hack/apportion-image/ociimage"
)

// defaultCABundle is the build machine's CA bundle (Debian's path), copied
// into the image when present.
var defaultCABundle = "/etc/ssl/certs/ca-certificates.crt"

var usage = `Usage: apportion-image --amd64 BIN --arm64 BIN --version V --revision R --out DIR [flags]

Writes the container image of apportion, one image per static Linux binary,
as an OCI image layout directory (optionally also as a tar archive of it), reads
it back, checks it and prints: platform, manifest digest, compressed size,
user and entrypoint. Every image runs as 65532:65532 with the entrypoint
["/apportion","webhook"]. No container engine or registry is needed.

Flags:
  --amd64 BIN                the linux/amd64 binary (same as --binary linux/amd64=BIN)
  --arm64 BIN                the linux/arm64 binary (same as --binary linux/arm64/v8=BIN)
  --binary PLATFORM=BIN      a binary for PLATFORM (linux/ARCH[/VARIANT]); repeatable
  --version V                org.opencontainers.image.version (required)
  --revision R               org.opencontainers.image.revision, the git commit (required)
  --source URL               org.opencontainers.image.source (default ` + ociimage.DefaultSource + `)
  --title T                  org.opencontainers.image.title (default ` + ociimage.DefaultTitle + `)
  --description D            org.opencontainers.image.description (default: a one-line summary)
  --licenses SPDX            org.opencontainers.image.licenses (default: none)
  --source-date-epoch N      the time of the image and its files, Unix seconds
                             (default $SOURCE_DATE_EPOCH, else 0)
  --ca-bundle FILE           PEM CA bundle for ` + ociimage.CABundlePath + ` (default
                             ` + defaultCABundle + ` when present; "" for none)
  --out DIR                  the OCI image layout to write; an earlier layout there is replaced (required)
  --tarball FILE             also write the layout as this tar file (an OCI archive)

Exit status: 0 written and checked, 1 the build or the check failed, 2 bad usage.
`

type config struct {
	bins      []ociimage.Binary
	opts      ociimage.Options
	caPath    string // "" for none
	caDefault bool   // caPath is the default, which may be absent
	out       string
	tarball   string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := parse(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "apportion-image: %v\nRun apportion-image -h for the flags.\n", err)
		return 2
	}
	if err := build(cfg, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "apportion-image: %v\n", err)
		return 1
	}
	return 0
}

func parse(args []string, getenv func(string) string) (*config, error) {
	fs := flag.NewFlagSet("apportion-image", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	cfg := &config{}
	bl := &binaryList{}
	epoch := defineFlags(fs, cfg, bl, getenv)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg.bins = bl.bins
	errs := bl.errs
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if len(cfg.bins) == 0 && len(bl.errs) == 0 {
		errs = append(errs, errors.New("no binary: give --amd64, --arm64 or --binary"))
	}
	errs = append(errs, checkRequired(cfg)...)
	if *epoch != "" {
		created, err := parseSourceDateEpoch(*epoch)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.opts.Created = created
	}
	if err := checkTarball(cfg.out, cfg.tarball); err != nil {
		errs = append(errs, err)
	}
	cfg.caDefault = !flagGiven(fs, "ca-bundle")
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// binaryList collects the binaries of --amd64, --arm64 and --binary in
// command-line order. A bad platform or path is kept in errs, not returned,
// so that it is reported together with the other usage errors.
type binaryList struct {
	bins []ociimage.Binary
	errs []error
}

func (l *binaryList) add(platform, path string) {
	p, err := ociimage.ParsePlatform(platform)
	if err != nil {
		l.errs = append(l.errs, err)
		return
	}
	if path == "" {
		l.errs = append(l.errs, fmt.Errorf("empty binary path for %s", platform))
		return
	}
	for _, b := range l.bins {
		if b.Platform.String() == p.String() {
			l.errs = append(l.errs, fmt.Errorf("two binaries for %s", p))
			return
		}
	}
	l.bins = append(l.bins, ociimage.Binary{Platform: p, Path: path})
}

// defineFlags binds the flags to cfg and bl; it returns --source-date-epoch,
// which parse checks once the flags are read.
func defineFlags(fs *flag.FlagSet, cfg *config, bl *binaryList, getenv func(string) string) *string {
	fs.Func("amd64", "", func(v string) error { bl.add("linux/amd64", v); return nil })
	fs.Func("arm64", "", func(v string) error { bl.add("linux/arm64", v); return nil })
	fs.Func("binary", "", func(v string) error {
		platform, path, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("want PLATFORM=PATH, got %q", v)
		}
		bl.add(platform, path)
		return nil
	})
	m := &cfg.opts.Metadata
	fs.StringVar(&m.Version, "version", "", "")
	fs.StringVar(&m.Revision, "revision", "", "")
	fs.StringVar(&m.Source, "source", ociimage.DefaultSource, "")
	fs.StringVar(&m.Title, "title", ociimage.DefaultTitle, "")
	fs.StringVar(&m.Description, "description", ociimage.DefaultDescription, "")
	fs.StringVar(&m.Licenses, "licenses", "", "")
	epoch := fs.String("source-date-epoch", getenv("SOURCE_DATE_EPOCH"), "")
	fs.StringVar(&cfg.caPath, "ca-bundle", defaultCABundle, "")
	fs.StringVar(&cfg.out, "out", "", "")
	fs.StringVar(&cfg.tarball, "tarball", "", "")
	return epoch
}

// checkRequired reports each required flag left empty or blank.
func checkRequired(cfg *config) []error {
	m := cfg.opts.Metadata
	var errs []error
	for _, f := range []struct{ name, v string }{{"version", m.Version}, {"revision", m.Revision}, {"source", m.Source}, {"out", cfg.out}} {
		if strings.TrimSpace(f.v) == "" {
			errs = append(errs, fmt.Errorf("--%s is required", f.name))
		}
	}
	return errs
}

// parseSourceDateEpoch reads --source-date-epoch (or SOURCE_DATE_EPOCH); the
// bound is the last second of the year 9999, the last that Go's time writes
// as RFC 3339 JSON.
func parseSourceDateEpoch(s string) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 253402300799 {
		err = fmt.Errorf("--source-date-epoch (or SOURCE_DATE_EPOCH) %q: want Unix seconds from 0 to 253402300799", s)
	}
	return time.Unix(n, 0).UTC(), err
}

// checkTarball refuses a tarball inside the layout folder, which WriteLayout
// replaces whole.
func checkTarball(out, tarball string) error {
	if out == "" || tarball == "" {
		return nil
	}
	if rel, err := filepath.Rel(out, tarball); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("--tarball %s is inside --out %s, which is replaced whole", tarball, out)
	}
	return nil
}

// flagGiven reports whether name was set on the command line, not left at
// its default.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}

func build(cfg *config, stdout, stderr io.Writer) error {
	for _, b := range cfg.bins {
		if err := ociimage.CheckBinary(b.Path, b.Platform); err != nil {
			return err
		}
	}
	if err := loadCABundle(cfg, stderr); err != nil {
		return err
	}
	idx, err := ociimage.Build(cfg.bins, cfg.opts)
	if err != nil {
		return err
	}
	ref := ociimage.RefName(cfg.opts.Version)
	if err := ociimage.WriteLayout(cfg.out, idx, ref); err != nil {
		return err
	}
	d, err := ociimage.Describe(cfg.out)
	if err != nil {
		return fmt.Errorf("check %s: %w", cfg.out, err)
	}
	if err := ociimage.Verify(d, cfg.bins, cfg.opts); err != nil {
		return fmt.Errorf("check %s: %w", cfg.out, err)
	}
	if d.RefName != ref {
		return fmt.Errorf("check %s: ref name %q, want %q", cfg.out, d.RefName, ref)
	}
	refNote := ""
	if ref != "" {
		refNote = ", ref " + ref
	}
	ca := "no CA bundle"
	if cfg.opts.CABundle != nil {
		ca = "CA bundle from " + cfg.caPath
	}
	fmt.Fprintf(stdout, "wrote %s: OCI image layout, index %s%s, %s\n", cfg.out, d.IndexDigest, refNote, ca)
	for _, pi := range d.Platforms {
		ep, _ := json.Marshal(pi.Config.Config.Entrypoint)
		fmt.Fprintf(stdout, "%-15s %s %7.2f MB  user %s  entrypoint %s\n",
			pi.Platform.String(), pi.Digest, float64(pi.CompressedSize)/1e6, pi.Config.Config.User, ep)
	}
	if cfg.tarball != "" {
		if err := ociimage.WriteArchive(cfg.tarball, cfg.out, cfg.opts.Created); err != nil {
			return fmt.Errorf("--tarball: %w", err)
		}
		fi, err := os.Stat(cfg.tarball)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s: OCI archive of %s, %.2f MB\n", cfg.tarball, cfg.out, float64(fi.Size())/1e6)
	}
	return nil
}

// loadCABundle reads --ca-bundle into cfg.opts. Only the default path may be
// missing (a build machine without ca-certificates): that is a warning.
func loadCABundle(cfg *config, stderr io.Writer) error {
	if cfg.caPath == "" {
		return nil
	}
	ca, err := os.ReadFile(cfg.caPath)
	switch {
	case err != nil && cfg.caDefault && errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stderr, "apportion-image: warning: no CA bundle at %s: the image has none (install ca-certificates or pass --ca-bundle FILE)\n", cfg.caPath)
	case err != nil:
		return fmt.Errorf("--ca-bundle: %w", err)
	default:
		if err := ociimage.CheckCABundle(ca); err != nil {
			return fmt.Errorf("--ca-bundle %s: %w", cfg.caPath, err)
		}
		cfg.opts.CABundle = ca
	}
	return nil
}
