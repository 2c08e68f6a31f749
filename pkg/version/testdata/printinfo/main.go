// Command printinfo prints version.Get() as JSON. The version test builds
// it: a test binary records no dependencies in its build information, a
// program does.
package main

import (
	"encoding/json"
	"os"

	"github.com/apportion-dev/apportion/pkg/version"

	// Linked as in apportion, so the build information lists Karpenter.
	_ "sigs.k8s.io/karpenter/pkg/apis/v1"
)

func main() {
	if err := json.NewEncoder(os.Stdout).Encode(version.Get()); err != nil {
		os.Exit(1)
	}
}
