package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/imagearch"
	"github.com/apportion-dev/apportion/pkg/registries"
)

const inspectUsage = `Usage: apportion inspect IMAGE... [--pull-secret FILE] [-o table|json] [--timeout 30s]

Reads from the registry which platforms each image runs on (an OCI index or Docker manifest
list gives its entries, attestations left out; a single image its config), with the code the
placement controller uses, and the linux architectures all the images share: the architectures
a pod made of these images can be placed on. It reads from any registry host, localhost
included: settings.imageRegistries restricts the placement controller only, since this command
runs with your own network access. Registry errors are shown as the controller's Events show
them: host, HTTP status and error code, never the registry's message.

  --pull-secret FILE  a docker config JSON: the .dockerconfigjson of a kubernetes.io/dockerconfigjson
                      Secret (e.g. kubectl get secret regcred -o jsonpath='{.data.\.dockerconfigjson}' | base64 -d)
                      or a ~/.docker/config.json; tried first, then ECR credentials from the AWS
                      identity (ECR registries only), then your docker credentials, then anonymous
  -o FORMAT           table (default) or json: {"images":[{"reference":..., "platforms":[...]}], "architectures":[...]}
  --timeout D         bound of the whole inspection (default 30s)
`

// inspectFlags are the options of `apportion inspect`.
type inspectFlags struct {
	pullSecret string
	output     string
	timeout    time.Duration
}

func (o *inspectFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.pullSecret, "pull-secret", "", "docker config JSON")
	fs.StringVar(&o.output, "o", "table", "output format")
	fs.StringVar(&o.output, "output", "table", "output format")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound of the inspection")
}

// inspectOutput is the JSON output of `apportion inspect`.
type inspectOutput struct {
	Images        []inspectImage `json:"images"`
	Architectures []string       `json:"architectures"`
}

type inspectImage struct {
	Reference string   `json:"reference"`
	Platforms []string `json:"platforms"`
}

// Inspect runs `apportion inspect`.
func Inspect(args []string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "apportion inspect: "+format+"\n", a...)
		return ExitUsage
	}
	var o inspectFlags
	refs, err := o.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, inspectUsage)
		return ExitOK
	} else if err != nil {
		return fail("%v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	kc, err := o.keychain(ctx)
	if err != nil {
		return fail("%v", err)
	}
	in := imagearch.New(nil, imagearch.Options{
		RegistryTimeout: o.timeout,
		Registries:      registries.Open(),
		Keychain:        func(context.Context, imagearch.Credentials) (authn.Keychain, error) { return kc, nil },
	})

	images, errs := inspectAll(ctx, in, refs)
	if len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintf(stderr, "apportion inspect: %v\n", err)
		}
		return ExitFailure
	}
	out := inspectOutput{Architectures: imagearch.Intersect(images)}
	for _, img := range images {
		ii := inspectImage{Reference: img.Reference, Platforms: []string{}}
		for _, p := range img.Platforms {
			ii.Platforms = append(ii.Platforms, p.String())
		}
		out.Images = append(out.Images, ii)
	}
	if o.output == "json" {
		err = writeInspectJSON(stdout, out)
	} else {
		err = writeInspectTable(stdout, out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "apportion inspect: writing output: %v\n", err)
		return ExitFailure
	}
	return ExitOK
}

// parse reads the flags and the image references, which may come in any
// order, and checks them; it returns flag.ErrHelp for -h.
func (o *inspectFlags) parse(args []string) ([]string, error) {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.bind(fs)
	// Parse up to each image, then go on after it.
	var refs []string
	for rest := args; ; {
		if err := fs.Parse(rest); errors.Is(err, flag.ErrHelp) {
			return nil, err
		} else if err != nil {
			return nil, fmt.Errorf("%w (see apportion inspect -h)", err)
		}
		if fs.NArg() == 0 {
			break
		}
		refs = append(refs, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(refs) == 0 {
		return nil, errors.New("no image given (see apportion inspect -h)")
	}
	if o.output != "table" && o.output != "json" {
		return nil, fmt.Errorf("-o must be table or json, got %q", o.output)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("--timeout must be positive, got %v", o.timeout)
	}
	for _, ref := range refs {
		if strings.TrimSpace(ref) == "" {
			return nil, errors.New("empty image reference")
		}
	}
	return refs, nil
}

// keychain is --pull-secret first, then ECR, then the user's docker
// credentials; anonymous when none has credentials.
func (o *inspectFlags) keychain(ctx context.Context) (authn.Keychain, error) {
	chain := []authn.Keychain{}
	if o.pullSecret != "" {
		data, err := os.ReadFile(o.pullSecret)
		if pe := (*os.PathError)(nil); errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %w", o.pullSecret, pe.Err)
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", o.pullSecret, err)
		}
		kc, err := imagearch.DockerConfigKeychain(ctx, data)
		if err != nil {
			return nil, fmt.Errorf("%s: not a docker config JSON: %w", o.pullSecret, err)
		}
		chain = append(chain, kc)
	}
	chain = append(chain, imagearch.ECRKeychain(), authn.DefaultKeychain)
	return authn.NewMultiKeychain(chain...), nil
}

// inspectAll looks the distinct references up in parallel; every failure is
// reported, each naming its image.
func inspectAll(ctx context.Context, in *imagearch.Inspector, refs []string) ([]imagearch.Image, []error) {
	var images []imagearch.Image
	seen := map[string]bool{}
	for _, ref := range refs {
		if !seen[ref] {
			seen[ref] = true
			images = append(images, imagearch.Image{Reference: ref})
		}
	}
	errs := make([]error, len(images))
	var wg sync.WaitGroup
	for k := range images {
		wg.Go(func() {
			images[k].Platforms, errs[k] = in.Platforms(ctx, images[k].Reference, corev1.PullAlways, imagearch.Credentials{})
		})
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	return images, failed
}

func writeInspectJSON(w io.Writer, out inspectOutput) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writeInspectTable(w io.Writer, out inspectOutput) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tPLATFORMS")
	for _, img := range out.Images {
		fmt.Fprintf(tw, "%s\t%s\n", img.Reference, strings.Join(img.Platforms, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	archs := "none"
	if len(out.Architectures) > 0 {
		archs = strings.Join(out.Architectures, " ")
	}
	_, err := fmt.Fprintf(w, "\nlinux architectures of all images: %s\n", archs)
	return err
}
