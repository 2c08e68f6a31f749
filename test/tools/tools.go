//go:build tools

// Package tools records the main packages build.sh compiles, so that
// `go mod tidy` keeps their modules (and go.sum lines) in this module.
// It is never built: importing a main package is only legal for tidy's
// dependency walk, which is why the file sits behind the "tools" tag.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/karpenter/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
