//go:build e2e

// Package placement_test runs `apportion webhook` against a real control
// plane with Karpenter's kwok provider (test/cluster) and checks the
// placement contract end to end: exact splits under the ReplicaSet
// controller's bursts, scale-down by deletion cost, rolling updates, two
// replicas with a leader killed mid-burst, user constraints, taints, and the
// fail-open paths.
package placement_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

const gateTimeout = 30 * time.Second

var env struct {
	c       *cluster.Cluster
	kube    client.Client
	bin     string
	certDir string
	lb      *framework.Balancer
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests start their own replicas (startReplicas), behind env.lb.
	os.Exit(framework.RunSuite(m, &framework.Suite{}, framework.SuiteOptions{Name: "placement", NodePools: true,
		Ready: func(_ context.Context, s *framework.Suite) error {
			env.c, env.kube, env.bin, env.certDir, env.lb = s.C, s.Kube, s.Bin, s.CertDir, s.LB
			return nil
		}}))
}

var replicaSeq atomic.Int32

// startReplicas starts n webhook processes (with the extra flags args)
// behind the balancer and waits until they serve and a leader holds the
// Lease. Cleanup stops them.
func startReplicas(t *testing.T, n int, args ...string) []*framework.Replica {
	t.Helper()
	var rs []*framework.Replica
	ports := make([]int, n)
	for i := range n {
		r, err := framework.StartReplica(env.c, env.bin, env.certDir, fmt.Sprintf("apportion-%d", replicaSeq.Add(1)), gateTimeout, args...)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
		ports[i] = r.Port
	}
	t.Cleanup(func() {
		env.lb.Set()
		for _, r := range rs {
			r.Stop()
		}
		if t.Failed() {
			for _, r := range rs {
				t.Logf("--- %s log tail\n%s", r.Name, tailLog(env.c, r.Name, 40))
			}
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, r := range rs {
		if err := r.WaitReady(ctx); err != nil {
			t.Fatalf("%v: %s", err, tailLog(env.c, r.Name, 20))
		}
	}
	env.lb.Set(ports...)
	waitFor(t, time.Minute, "a placement leader", func() error {
		if !framework.LeaderAlive(t.Context(), env.kube) {
			return fmt.Errorf("no fresh Lease %s/%s", framework.SystemNamespace, framework.LeaseName)
		}
		return nil
	})
	return rs
}

// tailLog returns the last lines of a component's log in cluster c.
func tailLog(c *cluster.Cluster, name string, lines int) string {
	return framework.TailLog(c, name, lines)
}

// waitFor polls check every 250ms until it returns nil or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	framework.WaitFor(t, timeout, what, check)
}

// failedOpen is the API server's log line for an admission call to the pod
// webhook that failed and let the pod in unchanged (failure policy Ignore).
const failedOpen = `Failed calling webhook, failing open ` + framework.PodWebhookName

// failedOpenCalls counts the admission calls to the pod webhook the API
// server has failed open on so far.
func failedOpenCalls(t *testing.T) int {
	t.Helper()
	f, err := os.Open(filepath.Join(env.c.LogDir(), "kube-apiserver.log"))
	if err != nil {
		t.Fatalf("opening the kube-apiserver log: %v", err)
	}
	defer func() { _ = f.Close() }()
	n := 0
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if strings.Contains(s.Text(), failedOpen) {
			n++
		}
	}
	return n
}
