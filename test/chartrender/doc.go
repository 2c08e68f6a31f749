// Package chartrender renders chart/ and chart-crd/ with the helm CLI (`helm
// template`, no cluster) and checks the objects the templates make: `go test
// ./test/chartrender/`.
//
// The helm binary is $HELM if set, else the one test/tools/build.sh built
// (make helm-lint and the e2e tests build it), else the tests build helm alone
// from test/tools/helm's go.mod into a temporary folder (a few minutes the
// first time, then from the Go build cache).
package chartrender
