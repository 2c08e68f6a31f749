//go:build tools

// Package tools records the cosign CLI's main package so that `go mod tidy`
// keeps cosign's modules in this module's go.mod and go.sum. Never built.
package tools

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
