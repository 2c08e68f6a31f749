//go:build e2e

// Package chart_test installs chart/ with the helm CLI into a local cluster
// (test/cluster, with Karpenter's kwok provider) and checks that apportion
// serves through the chart's own objects: the API server calls the webhook
// through the chart's Service, at the IPs of the chart's pods, with the
// certificate apportion wrote into the chart's Secret, and apportion works
// with the chart's ServiceAccount token and RBAC alone. kwok only pretends
// to run pods, so framework.Kubelet runs the chart's pods' processes.
package chart_test

import (
	"context"
	"flag"
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

var update = flag.Bool("update", false, "rewrite testdata/rbac-allowlist.txt from what the cluster says")

var env struct {
	c       *cluster.Cluster
	kube    client.Client
	bin     string
	kubelet *framework.Kubelet
}

func TestMain(m *testing.M) {
	flag.Parse()
	// E2E_LOG_DIR keeps every component's and pod's log after the run (framework.LogDir).
	os.Exit(framework.RunSuite(m, &framework.Suite{}, framework.SuiteOptions{Name: "chart", NodePools: true, Chart: true,
		Ready: func(_ context.Context, s *framework.Suite) error {
			env.c, env.kube, env.bin, env.kubelet = s.C, s.Kube, s.Bin, s.Kubelet
			return nil
		}}))
}

// helm runs the cluster's helm (framework.Helm).
func helm(ctx context.Context, args ...string) (string, error) {
	return framework.Helm(ctx, env.c, args...)
}

// kubectl runs the cluster's kubectl with the admin kubeconfig.
func kubectl(args ...string) (string, error) {
	out, err := env.c.Command("kubectl", args...).CombinedOutput()
	return string(out), err
}

func chartDir() string { return filepath.Join(framework.RepoRoot(), "chart") }

func testdata(name string) string {
	return filepath.Join(framework.RepoRoot(), "test", "e2e", "chart", "testdata", name)
}

// logTail returns the last lines of a log of the cluster's log folder.
func logTail(name string, lines int) string { return framework.TailLog(env.c, name, lines) }

// waitFor polls check every 250ms until it returns nil or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	framework.WaitFor(t, timeout, what, check)
}
