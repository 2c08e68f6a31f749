package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/imagearch"
	"github.com/apportion-dev/apportion/pkg/registries"
)

const inspectLong = `Reads from the registry which platforms each image runs on (an OCI index or Docker
manifest list gives its entries, attestations left out; a single image its config), with
the code the placement controller uses, and the linux architectures all the images share:
the architectures a pod made of these images can be placed on. It reads from any registry
host, localhost included: settings.imageRegistries restricts the placement controller
only, since this command runs with your own network access. Registry errors are shown as
the controller's Events show them: host, HTTP status and error code, never the registry's
message.

Credentials: --pull-secret first, then ECR credentials from your AWS identity (ECR
registries only), then your docker credentials, then anonymous access.

-o json (and yaml, the same keys): {"images":[{"reference":...,"platforms":[...]}],
"architectures":[...]}. -o wide adds the linux architectures of each image.`

const inspectExample = `  # The platforms of two images and the architectures they share
  apportion inspect public.ecr.aws/nginx/nginx:1.27 busybox:1.36

  # A private image, with the pull secret of the cluster
  kubectl get secret regcred -o jsonpath='{.data.\.dockerconfigjson}' | base64 -d > config.json
  apportion inspect --pull-secret config.json -o json my-registry.example.com/app:1.4`

// inspectFlags are the options of `apportion inspect`.
type inspectFlags struct {
	pullSecret string
	output     string
	timeout    time.Duration
}

// inspectOutput is the JSON output of `apportion inspect`.
type inspectOutput struct {
	Images        []inspectImage `json:"images"`
	Architectures []string       `json:"architectures"`
}

type inspectImage struct {
	Reference string   `json:"reference"`
	Platforms []string `json:"platforms"`
	// archs are the image's linux architectures, for -o wide.
	archs []string
}

func newInspect() *cobra.Command {
	var o inspectFlags
	cmd := &cobra.Command{
		Use:     "inspect IMAGE... [--pull-secret FILE] [--timeout DURATION] [-o table|wide|json|yaml]",
		Short:   "Show the platforms of images, from their registries, and the architectures they share",
		Long:    inspectLong,
		Example: inspectExample,
		Args:    cobra.ArbitraryArgs,
		// The flags are in Use already.
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, refs []string) error {
			if err := o.check(refs); err != nil {
				return err
			}
			return o.run(refs, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.pullSecret, "pull-secret", "", "a docker config JSON: the .dockerconfigjson of a kubernetes.io/dockerconfigjson Secret, or a ~/.docker/config.json")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound of the whole inspection")
	addOutputFlag(fs, &o.output, outputTable, outputTable, outputWide, outputJSON, outputYAML)
	return cmd
}

func (o *inspectFlags) run(refs []string, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	kc, err := o.keychain(ctx)
	if err != nil {
		return err
	}
	in := imagearch.New(nil, imagearch.Options{
		RegistryTimeout: o.timeout,
		Registries:      registries.Open(),
		Keychain:        func(context.Context, imagearch.Credentials) (authn.Keychain, error) { return kc, nil },
	})

	images, errs := inspectAll(ctx, in, refs)
	if len(errs) > 0 {
		// One line per image; the last one is Main's.
		for _, err := range errs[:len(errs)-1] {
			fmt.Fprintf(stderr, "%s inspect: %v\n", Program, err)
		}
		return failed(errs[len(errs)-1])
	}
	out := inspectOutput{Architectures: imagearch.Intersect(images)}
	for _, img := range images {
		ii := inspectImage{Reference: img.Reference, Platforms: []string{}, archs: imagearch.Intersect([]imagearch.Image{img})}
		for _, p := range img.Platforms {
			ii.Platforms = append(ii.Platforms, p.String())
		}
		out.Images = append(out.Images, ii)
	}
	switch o.output {
	case outputJSON, outputYAML:
		err = writeStructured(stdout, o.output, out)
	default:
		err = writeInspectTable(stdout, out, o.output == outputWide)
	}
	return failedIf(err)
}

// check checks the flags and the image references, which may come before,
// after or between the flags.
func (o *inspectFlags) check(refs []string) error {
	if len(refs) == 0 {
		return fmt.Errorf("no image given (see %s inspect --help)", Program)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %v", o.timeout)
	}
	for _, ref := range refs {
		if strings.TrimSpace(ref) == "" {
			return errors.New("empty image reference")
		}
		// As the placement controller parses it (pkg/imagearch).
		if _, err := name.ParseReference(ref); err != nil {
			return fmt.Errorf("invalid image reference: %w", err)
		}
	}
	return nil
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

func writeInspectTable(w io.Writer, out inspectOutput, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "IMAGE\tLINUX ARCHITECTURES\tPLATFORMS")
	} else {
		fmt.Fprintln(tw, "IMAGE\tPLATFORMS")
	}
	for _, img := range out.Images {
		if wide {
			archs := "<none>"
			if len(img.archs) > 0 {
				archs = strings.Join(img.archs, ",")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", img.Reference, archs, strings.Join(img.Platforms, " "))
			continue
		}
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
