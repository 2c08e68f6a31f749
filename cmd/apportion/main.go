// Command apportion is the single binary of the project: the offline plan
// preview today, the admission webhook and controllers as they land.
package main

import (
	"os"

	"github.com/apportion-dev/apportion/pkg/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
