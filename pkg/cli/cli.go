// Package cli implements the apportion subcommands with spf13/cobra and
// pflag, the libraries kubectl is built on, so that the commands follow
// kubectl's conventions: --long and -x short flags, -o for the output
// format, "Usage:", "Examples:" and "Flags:" in every command's --help.
//
// Main runs a command line and returns the process exit status, so that
// commands can be tested without a process: 0 success, 1 failure while
// running (a registry or the API server unreachable, pods left gated,
// plan --strict finding a group left out), 2 invalid input (flags,
// arguments, a strategy, a file, an image reference).
//
// The commands: plan, the offline preview (plan.go); inspect, the platforms
// of images from their registries (inspect.go); webhook, the server and
// controllers (webhook.go); release-gates, which removes the scheduling gate
// from every pod that still holds it (releasegates.go); explain and status
// (explain.go); version (version.go); completion (completion.go). The
// commands that read a cluster share kubectl's flags (kube.go).
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// PluginName is the file name under which kubectl runs the binary as a
// plugin (kubectl apportion ...): a symlink or copy of apportion on $PATH.
const PluginName = "kubectl-apportion"

// Program is the command name help and errors show: "apportion", or
// "kubectl apportion" when run as the kubectl plugin (ProgramFor).
var Program = "apportion"

// ProgramFor is the command name for the binary's file name (argv[0]).
func ProgramFor(argv0 string) string {
	if strings.TrimSuffix(filepath.Base(argv0), ".exe") == PluginName {
		return "kubectl apportion"
	}
	return "apportion"
}

// Main runs one command line; args excludes the program name.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	if Program != root.Name() {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: Program}
		asPlugin(root)
	}
	if len(args) == 0 {
		root.InitDefaultHelpCmd()
		root.SetOut(stderr)
		_ = root.Usage()
		return ExitUsage
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return ExitOK
	}
	if se := (*silentExit)(nil); errors.As(err, &se) {
		return se.code
	}
	if !cmd.HasParent() && strings.HasPrefix(err.Error(), "unknown command") {
		err = fmt.Errorf("%w (see %s --help)", err, Program)
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	if fe := (*failure)(nil); errors.As(err, &fe) {
		return ExitFailure
	}
	return ExitUsage
}

// exampleCommand is a command line of an Example: "apportion" at the start
// of a line, after the indent.
var exampleCommand = regexp.MustCompile(`(?m)^(\s*)apportion `)

// asPlugin makes every command's examples start with Program (kubectl
// apportion), as the user runs it.
func asPlugin(c *cobra.Command) {
	c.Example = exampleCommand.ReplaceAllString(c.Example, "${1}"+Program+" ")
	c.Example = strings.ReplaceAll(c.Example, "(apportion completion ", "("+Program+" completion ")
	for _, sub := range c.Commands() {
		asPlugin(sub)
	}
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "apportion",
		Short: "Proportional, architecture-aware pod placement for Karpenter clusters",
		Long: `apportion places the pods of a workload across node groups (capacity types, instance
families, architectures) in the proportions its strategy asks for, on clusters that run
Karpenter (https://karpenter.sh).

Installed as kubectl-apportion on $PATH, it runs as kubectl apportion.

The commands that read a cluster (explain, status, release-gates) take kubectl's flags
(--kubeconfig, --context, -n, --as, --token, --server ...; see a command's --help) and
act on one namespace: -n, else the kubeconfig context's, else "default"; -A, where a
command has it, on every namespace.

Exit status: 0 success; 1 a failure while running (the cluster or a registry unreachable
or refusing, pods left gated, plan --strict finding a group left out); 2 invalid input
(flags, arguments, a strategy, a file, an image reference).`,
		Example: `  # Preview a strategy's split of 10 pods, with no cluster
  apportion plan --strategy 'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3' --replicas 10

  # The architectures two images share
  apportion inspect public.ecr.aws/nginx/nginx:1.27 busybox:1.36

  # A workload's split now against its strategy
  apportion status -n shop`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// completion.go replaces cobra's command, for its help.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newPlan(stdin), newInspect(), newExplain(), newStatus(), newWebhook(), newReleaseGates(), newVersion(), newCompletion())
	return root
}

// failure is an error while running: exit 1. Every other error a command
// returns, and every error of cobra's (unknown command, flag, arguments),
// is a usage error: exit 2.
type failure struct{ err error }

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func failed(err error) error { return &failure{err} }

// silentExit ends a command with a status whose messages it has already
// written.
type silentExit struct{ code int }

func (s *silentExit) Error() string { return fmt.Sprintf("exit status %d", s.code) }

// flagError points to --help and, for a long flag written with one dash
// (Go's flag package accepted -replicas), to its spelling.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	if _, arg, ok := strings.Cut(msg, "unknown shorthand flag: "); ok {
		if _, arg, ok = strings.Cut(arg, " in -"); ok {
			name, _, _ := strings.Cut(arg, "=")
			if len(name) > 1 && c.Flags().Lookup(name) != nil {
				return fmt.Errorf("%w (long flags take two dashes: --%s)", err, arg)
			}
		}
	}
	return fmt.Errorf("%w (see %s --help)", err, c.CommandPath())
}

// noArgs rejects positional arguments.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q (see %s --help)", args[0], c.CommandPath())
	}
	return nil
}

// Output formats of -o.
const (
	outputTable = "table"
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// outputValue is -o: one of a command's formats, checked as it is set, so
// that an unknown format is a flag error.
type outputValue struct {
	value   *string
	allowed []string
}

func (o *outputValue) String() string { return *o.value }
func (o *outputValue) Type() string   { return "format" }
func (o *outputValue) Set(v string) error {
	if !slices.Contains(o.allowed, v) {
		return fmt.Errorf("unknown output format: use %s", strings.Join(o.allowed, ", "))
	}
	*o.value = v
	return nil
}

// addOutputFlag registers -o, --output with def as default (which may be
// "" for plain text, not among allowed).
func addOutputFlag(fs *pflag.FlagSet, value *string, def string, allowed ...string) {
	*value = def
	fs.VarP(&outputValue{value: value, allowed: allowed}, "output", "o", "output format: "+strings.Join(allowed, ", "))
}

// writeStructured writes v as indented JSON or as YAML (the same keys).
func writeStructured(w io.Writer, format string, v any) error {
	if format == outputYAML {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
