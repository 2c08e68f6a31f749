// Command apportion is the project's single binary. Its subcommands
// (pkg/cli): `webhook` runs the admission webhooks and the controllers in a
// cluster; `plan` previews a strategy's split offline; `inspect` reports the
// architectures an image offers; `release-gates` removes the placement gate
// from pods left gated (a recovery tool); `version` prints the build.
package main

import (
	"os"

	"github.com/apportion-dev/apportion/pkg/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
