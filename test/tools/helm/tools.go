//go:build tools

// Package tools records the helm CLI's main package so that `go mod tidy`
// keeps helm's modules in this module's go.mod and go.sum. Never built.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
