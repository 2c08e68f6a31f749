//go:build tools

// This module is a tools set of the compatibility matrix (CONTRIBUTING.md,
// "Compatibility matrix"): Kubernetes v1.32.13, the oldest of the matrix, with
// the newest Karpenter, the default set's v1.15.0. It requires no
// sigs.k8s.io/karpenter, so `build.sh --set k8s1.32-karpenter1.15` builds
// Karpenter's kwok provider and takes its CRDs from ../../go.mod, as it does
// etcd, kwok and helm. Karpenter v1.15 needs k8s.io/* v0.36, which this
// module's replace block would pin at v0.32: that is why it is not here.
//
// The replace block is the one of ../k8s1.32-karpenter1.2 (see its tools.go
// for the five staging modules at an earlier v0.32 patch); keep the two the
// same, so that both sets' Kubernetes binaries are built alike.
//
// The notes are here, not in go.mod: build.sh stamps each binary with a hash
// of go.mod and go.sum, so an edit there rebuilds the whole set.

// Package tools records the main packages ../../build.sh compiles from this
// module, so that `go mod tidy` keeps their modules in it. It is never built
// (see ../../tools.go).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
