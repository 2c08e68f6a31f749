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
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	start := time.Now()
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		code = 1
	}
	framework.StopCluster(env.c, code, 60)
	fmt.Fprintf(os.Stderr, "smoke e2e (tools set %s): wall time %s\n", cluster.ToolsSet(), time.Since(start).Round(time.Second))
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp("", "apportion-e2e-smoke-")
	if err != nil {
		return 1, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// E2E_LOG_DIR keeps every component's and pod's log (framework.LogDir),
	// one folder per tools set.
	env.bin, env.c, err = framework.StartKarpenter(ctx, tmp, "smoke-"+cluster.ToolsSet())
	if env.c != nil {
		env.kube = env.c.Client()
	}
	if err != nil {
		return 1, err
	}
	env.kubelet = framework.NewKubelet(env.c, env.bin, filepath.Join(tmp, "pods"))
	kctx, stopKubelet := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { env.kubelet.Run(kctx); close(done) }()
	code := m.Run()
	stopKubelet()
	<-done
	return code, nil
}

// helm runs the cluster's helm (framework.Helm).
func helm(ctx context.Context, args ...string) (string, error) {
	return framework.Helm(ctx, env.c, args...)
}

// logTail returns the last lines of a log of the cluster's log folder.
func logTail(name string, lines int) string { return framework.TailLog(env.c, name, lines) }
