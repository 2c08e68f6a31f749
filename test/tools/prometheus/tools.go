//go:build tools

// Package tools records Prometheus's server and promtool main packages so
// that `go mod tidy` keeps their modules in this module's go.mod and go.sum.
// Never built.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
