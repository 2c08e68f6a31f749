// Command apportion is the project's single binary. Its subcommands
// (pkg/cli): `webhook` runs the admission webhooks and the controllers in a
// cluster; `plan` previews a strategy's split offline; `inspect` reports the
// architectures an image offers; `release-gates` removes the placement gate
// from pods left gated (a recovery tool); `explain` and `status` show the
// decisions and the splits of a live cluster; `version` prints the build.
// Installed as kubectl-apportion on $PATH, it is a kubectl plugin.
package main

import (
	"os"

	"github.com/apportion-dev/apportion/pkg/cli"
)

func main() {
	// Run as kubectl-apportion, the binary is a kubectl plugin.
	cli.Program = cli.ProgramFor(os.Args[0])
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
