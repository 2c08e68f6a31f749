// Package version holds build information, set with -ldflags -X at build
// time (see the Makefile).
package version

import "runtime"

var (
	// Version is the release (a git tag) or "dev".
	Version = "dev"
	// Commit is the git commit the binary was built from.
	Commit = "unknown"
)

// String is the one-line form `apportion version` prints.
func String() string {
	return "apportion " + Version + " (commit " + Commit + ", " + runtime.Version() + ")"
}
