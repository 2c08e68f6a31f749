// Package workflows checks the GitHub workflows of .github/workflows
// against the Makefile: every `make TARGET` a step runs names a target the
// Makefile has, and the CI workflow calls every target .ci/run calls, so
// the public CI and the local one run the same checks. make verify runs
// it, after actionlint: `go test ./test/workflows/`.
package workflows
