//go:build e2e

// Package batch_test runs `apportion webhook` against a real control plane
// with Karpenter's kwok provider (test/cluster) and checks batch owners end
// to end: an Indexed Job stays within quota among its live pods while its
// pods run and complete, each Job of a CronJob is split on its own, and pods
// owned by an Argo Workflow (its CRD from test/testdata/argo, pods created as
// Argo's controller creates them) are split per Workflow.
package batch_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/apportion-dev/apportion/test/framework"
)

const (
	gateTimeout = 30 * time.Second
	replicas    = 2
)

// env is the cluster and the replicas every test shares.
var env framework.Suite

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(framework.RunSuite(m, &env, framework.SuiteOptions{
		Name: "batch", NodePools: true,
		// The Workflow CRD is served before the replicas start, so that
		// they watch Workflows from the first admission.
		Prepare:  func(ctx context.Context, s *framework.Suite) error { return framework.InstallWorkflows(ctx, s.Kube) },
		Replicas: replicas, GateTimeout: gateTimeout,
	}))
}
