//go:build tools

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
