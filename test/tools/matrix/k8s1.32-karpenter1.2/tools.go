//go:build tools

// This module is a tools set of the compatibility matrix (CONTRIBUTING.md,
// "Compatibility matrix"): the oldest pair, Kubernetes v1.32.13 with
// Karpenter v1.2.0 (its kwok provider and its CRDs). `build.sh --set
// k8s1.32-karpenter1.2` builds it; etcd, kwok and helm come from
// ../../go.mod and ../../helm/go.mod, as in the default set.
//
// The replace block in go.mod maps the "=> ./staging/..." lines of
// kubernetes v1.32.13's go.mod to the published staging modules of the same
// release (v0.32.13), as ../../go.mod does for v1.36.4; regenerate it from
//   go mod download -json k8s.io/kubernetes@vX.Y.Z   (the .mod file it names)
// Five of them point at an earlier v0.32 patch, the newest that the Go
// module proxy this project builds from serves (it refuses v0.32.13 of
// these): cli-runtime and kubectl v0.32.3; cri-api, endpointslice and
// metrics v0.32.12. Patch releases of one minor keep their Go API, and none
// of the five is part of the API server.
//
// Karpenter v1.2.0 (released against k8s.io/* v0.32.1) is built against the
// same v0.32 modules, so both share compiled packages.
//
// The notes are here, not in go.mod: build.sh stamps each binary with a hash
// of go.mod and go.sum, so an edit there rebuilds the whole set.

// Package tools records the main packages ../../build.sh compiles for this
// tools set, so that `go mod tidy` keeps their modules in this module. It is
// never built (see ../../tools.go).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/karpenter/kwok"
)
