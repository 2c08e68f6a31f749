//go:build e2e

// Package smoke_test is the short suite of the compatibility matrix: on a
// local cluster of the tools set APPORTION_TOOLS_SET selects (a Kubernetes
// and a Karpenter version, see CONTRIBUTING.md "Compatibility matrix"), it
// installs chart/ with the helm CLI, places one workload by a strategy and
// checks the split exactly by the labels of the nodes the pods run on, and
// that the decisions name the Karpenter NodePool that served them.
// `make e2e-matrix` runs it once per set other than the default one, whose
// pair runs every suite (`make e2e`).
package smoke_test

import (
	"context"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	release   = "apportion"
	namespace = "apportion-system"
)

var env struct {
	c       *cluster.Cluster
	kube    client.Client
	bin     string
	kubelet *framework.Kubelet
}

func TestMain(m *testing.M) {
	// E2E_LOG_DIR keeps every component's and pod's log (framework.LogDir),
	// one folder per tools set.
	os.Exit(framework.RunSuite(m, &framework.Suite{}, framework.SuiteOptions{Name: "smoke-" + cluster.ToolsSet(), NodePools: true, Chart: true,
		Ready: func(_ context.Context, s *framework.Suite) error {
			env.c, env.kube, env.bin, env.kubelet = s.C, s.Kube, s.Bin, s.Kubelet
			return nil
		}}))
}

// helm runs the cluster's helm (framework.Helm).
func helm(ctx context.Context, args ...string) (string, error) {
	return framework.Helm(ctx, env.c, args...)
}

// logTail returns the last lines of a log of the cluster's log folder.
func logTail(name string, lines int) string { return framework.TailLog(env.c, name, lines) }
