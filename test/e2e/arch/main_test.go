//go:build e2e

// Package arch_test runs `apportion webhook` against a real control plane
// with Karpenter's kwok provider (test/cluster) and an OCI registry served
// by the test inside the cluster's network namespace
// (framework.StartRegistry), and checks architecture-aware placement end to
// end: pods land only on architectures their images support, strategy groups
// that cannot provide one are left out with an Event, architecture-only
// namespaces, private images through imagePullSecrets and ServiceAccounts,
// and the fail-open path when the registry stops answering.
//
// kwok plays kubelet, so images are never pulled: the registry is read by
// apportion alone, and its request counts are apportion's look-ups.
package arch_test

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/apportion-dev/apportion/test/framework"
)

const (
	// gateTimeout is the replicas' --gate-timeout: the bound within which a
	// pod whose registry is down must still be placed, by the controller.
	gateTimeout = 45 * time.Second
	// imageTimeout is the replicas' --image-timeout.
	imageTimeout = 3 * time.Second
	// replicas is the number of `apportion webhook` processes: two, so that
	// admission (gating) happens on the follower too.
	replicas = 2
)

// env is the cluster and the replicas every test shares.
var env framework.Suite

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(framework.RunSuite(m, &env, framework.SuiteOptions{
		Name: "arch", NodePools: true,
		Replicas: replicas, GateTimeout: gateTimeout,
		// --read-pull-secrets: TestPrivateImage reads private images with
		// the pods' pull secrets and their ServiceAccounts' (off by default).
		Args: []string{"--image-timeout=" + imageTimeout.String(), "--read-pull-secrets"},
	}))
}
