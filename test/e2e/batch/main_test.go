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
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/apportion-dev/apportion/pkg/workload"
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
		Prepare: func(ctx context.Context, s *framework.Suite) error {
			if err := framework.Apply(ctx, s.Kube, filepath.Join(framework.RepoRoot(), "test", "testdata", "argo")); err != nil {
				return err
			}
			return waitWorkflows(ctx, s)
		},
		Replicas: replicas, GateTimeout: gateTimeout,
	}))
}

// waitWorkflows waits until Workflows can be listed.
func waitWorkflows(ctx context.Context, s *framework.Suite) error {
	for {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(workload.WorkflowGVK.GroupVersion().WithKind("WorkflowList"))
		err := s.Kube.List(ctx, list)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the Workflow CRD: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
