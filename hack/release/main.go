// Command release is apportion's release tooling, run by `make release` and
// `make release-push` (see CONTRIBUTING.md, "Releasing"); the Makefile
// compiles the binaries, builds the image with hack/apportion-image and
// packages the charts with helm, and this program does the rest:
//
//	release check-version VERSION        print VERSION without its v, or fail
//	release normalize-chart --source-date-epoch N TGZ...
//	release sbom --version VERSION --source-date-epoch N --out FILE BIN
//	release krew --dir DIR --version VERSION --source-date-epoch N [--url-base URL]
//	release sums DIR                     write DIR/SHA256SUMS
//	release push --dir DIR --version VERSION --registry HOST[:PORT][/PREFIX] [--insecure] --helm HELM
//	             (--cosign-key KEY | --keyless) --cosign COSIGN --revision SHA --source-date-epoch N
//	             | --unsigned
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/apportion-dev/apportion/hack/release/releasekit"
)

const usage = `Usage: release COMMAND [flags]

Commands (make release and make release-push run them):
  check-version VERSION       print VERSION (vX.Y.Z[-pre]) without its v; exit 1 when it is not one
  normalize-chart --source-date-epoch N TGZ...
                              rewrite helm package archives so that a commit gives the same bytes
  sbom --version V --source-date-epoch N --out FILE BIN
                              write BIN's CycloneDX SBOM (JSON) from its Go build information
  krew --dir DIR --version V --source-date-epoch N [--url-base URL]
                              write the kubectl plugin's archives and krew manifest
  sums DIR                    write DIR/SHA256SUMS over the files of DIR
  push --dir DIR --version V --registry HOST[:PORT][/PREFIX] --helm HELM [--insecure]
                              push DIR/image as REGISTRY/apportion:X.Y.Z and DIR/*.tgz
                              to oci://REGISTRY/charts; print the digests
      --cosign-key KEY --cosign COSIGN --revision SHA --source-date-epoch N [--builder-id URI]
                              then sign the image index and the charts by digest and attach
                              the SBOMs and an SLSA provenance (password in COSIGN_PASSWORD)
      --keyless (instead of --cosign-key)
                              sign with the OIDC identity of the CI running cosign
                              (Fulcio certificate, signatures in the Rekor log)
      --unsigned              push without signing (refused without one of the two)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "check-version":
		err = checkVersion(args[1:], stdout)
	case "normalize-chart":
		err = normalizeCharts(args[1:])
	case "sbom":
		err = sbom(args[1:])
	case "krew":
		err = krew(args[1:], stdout)
	case "sums":
		if len(args) != 2 {
			err = errors.New("sums takes one folder")
			break
		}
		err = releasekit.WriteSums(args[1])
	case "push":
		err = push(ctx, args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = fmt.Errorf("unknown command %q", args[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "release %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func checkVersion(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("check-version takes one version")
	}
	v, err := releasekit.ParseVersion(args[0])
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, v)
	return nil
}

func epochTime(s string) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("--source-date-epoch %q: want Unix seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

func normalizeCharts(args []string) error {
	fs := flag.NewFlagSet("normalize-chart", flag.ContinueOnError)
	epoch := fs.String("source-date-epoch", "", "the time of every entry, Unix seconds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mt, err := epochTime(*epoch)
	if err != nil {
		return err
	}
	for _, f := range fs.Args() {
		if err := releasekit.NormalizeChart(f, mt); err != nil {
			return err
		}
	}
	return nil
}

func sbom(args []string) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	version := fs.String("version", "", "the release")
	epoch := fs.String("source-date-epoch", "", "the SBOM's time, Unix seconds")
	out := fs.String("out", "", "the file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *out == "" {
		return errors.New("want --out FILE and one binary")
	}
	if _, err := releasekit.ParseVersion(*version); err != nil {
		return err
	}
	created, err := epochTime(*epoch)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := releasekit.WriteBinarySBOM(f, fs.Arg(0), releasekit.SBOMOptions{Version: *version, Created: created}); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func krew(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("krew", flag.ContinueOnError)
	o := releasekit.KrewOptions{License: "LICENSE"}
	fs.StringVar(&o.Dir, "dir", "", "the release folder")
	fs.StringVar(&o.Version, "version", "", "the release")
	fs.StringVar(&o.URLBase, "url-base", "", "where the archives are published (default: the GitHub release of VERSION)")
	epoch := fs.String("source-date-epoch", "", "the archives' time, Unix seconds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || o.Dir == "" {
		return errors.New("want --dir, --version and --source-date-epoch, no arguments")
	}
	if o.URLBase == "" {
		o.URLBase = "https://github.com/apportion-dev/apportion/releases/download/" + o.Version
	}
	var err error
	if o.MTime, err = epochTime(*epoch); err != nil {
		return err
	}
	platforms, err := releasekit.WriteKrewPlugin(o)
	for _, p := range platforms {
		fmt.Fprintf(stdout, "kubectl plugin %s/%s: %s\n", p.OS, p.Arch, p.URI)
	}
	return err
}

func push(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	o := releasekit.PushOptions{}
	fs.StringVar(&o.Dir, "dir", "", "the release folder make release wrote")
	fs.StringVar(&o.Version, "version", "", "the release")
	fs.StringVar(&o.Registry, "registry", "", "host[:port][/prefix]")
	fs.BoolVar(&o.Insecure, "insecure", false, "plain HTTP (a local registry)")
	helm := fs.String("helm", "helm", "the helm binary")
	fs.BoolVar(&o.Unsigned, "unsigned", false, "push without signatures and attestations")
	s := releasekit.SignOptions{}
	fs.StringVar(&s.Key, "cosign-key", "", "the cosign private key (password in COSIGN_PASSWORD)")
	fs.BoolVar(&s.Keyless, "keyless", false, "sign with the CI's OIDC identity instead of a key")
	fs.StringVar(&s.Revision, "revision", "", "the git commit of the release (provenance)")
	fs.StringVar(&s.BuilderID, "builder-id", "", "the provenance's builder (default "+releasekit.DefaultBuilderID+")")
	epoch := fs.String("source-date-epoch", "", "the release's time, Unix seconds (provenance)")
	cosign := fs.String("cosign", "cosign", "the cosign binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || o.Dir == "" {
		return errors.New("want --dir, --version and --registry, no arguments")
	}
	o.Helm = releasekit.HelmCommand(*helm)
	if s.Key != "" || s.Keyless {
		var err error
		if s.SourceDateEpoch, err = epochTime(*epoch); err != nil {
			return err
		}
		s.Cosign = releasekit.CosignCommand(*cosign)
		o.Sign = &s
	}
	p, err := releasekit.Push(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, p)
	return nil
}
