// Package cli implements the apportion subcommands. Each command takes its
// arguments and output streams and returns the process exit status, so it
// can be tested without a process: 0 success, 1 failure while running, 2
// invalid input (flags, strategy, file).
//
// Main dispatches to them: Plan, the offline preview (plan.go); Inspect, the
// platforms of images from their registries (inspect.go); Webhook, the
// server and controllers (webhook.go); ReleaseGates, which removes the
// scheduling gate from every pod that still holds it (releasegates.go).
package cli

import (
	"fmt"
	"io"

	"github.com/apportion-dev/apportion/pkg/version"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

const usage = `apportion: proportional, architecture-aware pod placement for Karpenter clusters

Usage:
  apportion plan --strategy SPEC --replicas N [-f workload.yaml] [--nodepools pools.yaml] [-o table|json]
  apportion inspect IMAGE... [--pull-secret FILE] [-o table|json] [--timeout 30s]
                              the platforms of images from their registries, and the architectures they share
  apportion webhook [flags]   serve admission and run the placement controllers (-h for flags)
  apportion release-gates [--namespace NS] [--dry-run] [--kubeconfig FILE]
                              remove apportion's scheduling gate from every pod that still holds it
  apportion version
  apportion help

Run "apportion COMMAND -h" for the flags of a command.
`

// Main dispatches a subcommand; args excludes the program name.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "plan":
		return Plan(args[1:], stdin, stdout, stderr)
	case "inspect":
		return Inspect(args[1:], stdout, stderr)
	case "webhook":
		return Webhook(args[1:], stdout, stderr)
	case "release-gates":
		return ReleaseGates(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version.String())
		return ExitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "apportion: unknown command %q (commands: plan, inspect, webhook, release-gates, version, help)\n", args[0])
		return ExitUsage
	}
}
