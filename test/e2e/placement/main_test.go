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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		if env.c != nil {
			env.c.DumpLogs(os.Stderr, 60)
		}
		code = 1
	}
	framework.StopCluster(env.c, code, 60)
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp("", "apportion-e2e-")
	if err != nil {
		return 1, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	env.bin, env.c, err = framework.StartKarpenter(ctx, tmp, "placement")
	if env.c != nil {
		env.kube = env.c.Client()
	}
	if err != nil {
		return 1, err
	}
	if err := env.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: framework.SystemNamespace}}); err != nil {
		return 1, err
	}
	env.certDir = filepath.Join(tmp, "certs")
	if err := os.MkdirAll(env.certDir, 0o700); err != nil {
		return 1, err
	}
	if _, _, err := env.c.IssueServingCert(env.certDir); err != nil {
		return 1, err
	}
	if env.lb, err = framework.NewBalancer(env.c); err != nil {
		return 1, err
	}
	defer env.lb.Close()
	if err := framework.Register(ctx, env.kube, env.c.CABundle(), env.lb.Port); err != nil {
		return 1, err
	}
	return m.Run(), nil
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
