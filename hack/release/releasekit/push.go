package releasekit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ImageRepository is the repository under the registry the image is
// pushed to; the chart's controller.image.repository names it.
const ImageRepository = "apportion"

// ChartRepository is the folder under the registry the charts are pushed
// to: a chart NAME is oci://REGISTRY/charts/NAME.
const ChartRepository = "charts"

// PushOptions say what to push where.
type PushOptions struct {
	// Dir is the release folder `make release` wrote (image/ and *.tgz).
	Dir string
	// Version is the release (v1.2.3); the image tag and chart version are
	// it without the v.
	Version string
	// Registry is host[:port][/prefix].
	Registry string
	// Insecure talks plain HTTP to the registry (a local one).
	Insecure bool
	// Helm runs helm with args (`helm push`); its combined output is
	// parsed for the chart's digest.
	Helm func(ctx context.Context, args ...string) ([]byte, error)
	// Transport reaches the registry (nil: http.DefaultTransport).
	Transport http.RoundTripper
	// Sign signs the image index and the charts and attaches the
	// attestations (sign.go). Without it Push refuses, unless Unsigned.
	Sign *SignOptions
	// Unsigned pushes without signatures: the user said so.
	Unsigned bool
}

// Pushed is what Push pushed.
type Pushed struct {
	// Image is REGISTRY/apportion:TAG, ImageDigest the digest of its index.
	Image       string
	ImageDigest v1.Hash
	// Charts are the charts pushed, in the release folder's order.
	Charts []PushedChart
	// Signed are the references signed, by digest: the image index
	// first, then the charts. Empty when pushed unsigned.
	Signed []string
}

// PushedChart is one chart pushed.
type PushedChart struct {
	// Name is the chart name (apportion), Ref oci://REGISTRY/charts/NAME.
	Name, Ref, Version string
	Digest             string
}

// chartDigest is the line `helm push` prints with the chart manifest's digest.
var chartDigest = regexp.MustCompile(`(?m)^Digest:\s*(sha256:[0-9a-f]{64})\s*$`)

// Push pushes the image layout Dir/image as REGISTRY/apportion:TAG (the
// whole multi-arch index) with go-containerregistry, then each chart
// archive of Dir with `helm push` to oci://REGISTRY/charts, then signs
// and attests them by digest with o.Sign.
func Push(ctx context.Context, o PushOptions) (*Pushed, error) {
	tag, err := ParseVersion(o.Version)
	if err != nil {
		return nil, err
	}
	// Before anything is pushed: a tag without a signature would be
	// there for anyone to pull.
	if err := checkSigning(o, tag); err != nil {
		return nil, err
	}
	if o.Registry == "" || strings.Contains(o.Registry, "://") {
		return nil, fmt.Errorf("registry %q: want host[:port][/prefix], without a scheme", o.Registry)
	}
	reg := strings.TrimSuffix(o.Registry, "/")
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ref, err := name.NewTag(reg+"/"+ImageRepository+":"+tag, nameOpts...)
	if err != nil {
		return nil, fmt.Errorf("image reference: %w", err)
	}
	p, err := layout.FromPath(filepath.Join(o.Dir, "image"))
	if err != nil {
		return nil, fmt.Errorf("reading the image layout (run make release first): %w", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	// The layout's index lists one entry, the multi-arch index itself.
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, errors.New("the image layout should hold one image index")
	}
	image, err := idx.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, err
	}
	tr := o.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	if err := remote.WriteIndex(ref, image, remote.WithContext(ctx), remote.WithTransport(tr),
		remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return nil, fmt.Errorf("pushing %s: %w", ref, err)
	}
	out := &Pushed{Image: ref.String(), ImageDigest: m.Manifests[0].Digest}

	charts, err := filepath.Glob(filepath.Join(o.Dir, "*-"+tag+".tgz"))
	if err != nil || len(charts) == 0 {
		return nil, fmt.Errorf("no chart archive *-%s.tgz in %s (run make release first)", tag, o.Dir)
	}
	for _, c := range charts {
		pc, err := pushChart(ctx, o, reg, tag, c)
		if err != nil {
			return nil, err
		}
		out.Charts = append(out.Charts, pc)
	}
	if err := sign(ctx, o, tag, out); err != nil {
		return nil, fmt.Errorf("signing (the release is pushed, unsigned; push again to sign it): %w", err)
	}
	return out, nil
}

func pushChart(ctx context.Context, o PushOptions, reg, tag, archive string) (PushedChart, error) {
	chartName := strings.TrimSuffix(filepath.Base(archive), "-"+tag+".tgz")
	args := []string{"push", archive, "oci://" + reg + "/" + ChartRepository}
	if o.Insecure {
		args = append(args, "--plain-http")
	}
	helmOut, err := o.Helm(ctx, args...)
	if err != nil {
		return PushedChart{}, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, helmOut)
	}
	d := chartDigest.FindSubmatch(helmOut)
	if d == nil {
		return PushedChart{}, fmt.Errorf("helm push printed no digest:\n%s", helmOut)
	}
	return PushedChart{
		Name: chartName, Ref: "oci://" + reg + "/" + ChartRepository + "/" + chartName,
		Version: tag, Digest: string(d[1]),
	}, nil
}

// HelmCommand returns a PushOptions.Helm that runs the helm binary at path.
func HelmCommand(path string) func(ctx context.Context, args ...string) ([]byte, error) {
	return func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Env = os.Environ()
		return cmd.CombinedOutput()
	}
}

// String prints what was pushed and how to install it.
func (p *Pushed) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "image %s@%s\n", p.Image, p.ImageDigest)
	for _, c := range p.Charts {
		fmt.Fprintf(&b, "chart %s:%s@%s\n", c.Ref, c.Version, c.Digest)
	}
	for _, s := range p.Signed {
		fmt.Fprintf(&b, "signed %s\n", s)
	}
	if len(p.Signed) == 0 {
		b.WriteString("unsigned: nothing was signed or attested\n")
	}
	return b.String()
}
