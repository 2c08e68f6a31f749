package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/cluster"
)

// Suite is what an e2e package shares across its tests: one local cluster,
// the apportion binary, a serving certificate, the balancer the webhooks are
// registered behind, and the `apportion webhook` replicas behind it.
type Suite struct {
	C        *cluster.Cluster
	Kube     client.Client
	Bin      string
	CertDir  string
	LB       *Balancer
	Replicas []*Replica
	// Kubelet runs the processes of the pods the chart creates, when
	// SuiteOptions.Chart.
	Kubelet *Kubelet
	// Dir is the suite's scratch folder, removed at the end.
	Dir string
}

// SuiteOptions say how RunSuite sets a suite up, in this order: build
// apportion, Configure, start the cluster (Karpenter's kwok provider, logs
// kept in E2E_LOG_DIR when set), apply the shared NodePools if asked, Prepare,
// wait for the NodePools, create the system namespace, issue the certificate,
// register the webhooks behind the balancer, start the replicas and wait for
// a leader, then Ready.
type SuiteOptions struct {
	// Name prefixes the scratch folder and the wall-time line.
	Name string
	// Configure may change the cluster's options (e.g. KarpenterEnv) with
	// files written to Suite.Dir.
	Configure func(ctx context.Context, s *Suite, opts *cluster.Options) error
	// NodePools applies test/testdata/karpenter.
	NodePools bool
	// Prepare creates what the suite needs before the webhooks exist; it
	// may replace Suite.Kube (a client that knows more kinds).
	Prepare func(ctx context.Context, s *Suite) error
	// Chart: the tests install apportion with helm, so the suite issues no
	// certificate and registers no webhook; a Kubelet runs the processes of
	// the chart's pods (kwok only pretends to run them).
	Chart bool
	// Replicas `apportion webhook` processes with GateTimeout and Args (0:
	// the tests start their own, behind LB).
	Replicas    int
	GateTimeout time.Duration
	Args        []string
	// Ready runs once a leader holds the Lease, before the tests.
	Ready func(ctx context.Context, s *Suite) error
}

// RunSuite sets the suite up, runs the tests, prints the replicas' and the
// components' logs if anything failed, and stops everything. It returns the
// exit status for os.Exit.
func RunSuite(m *testing.M, s *Suite, o SuiteOptions) int {
	start := time.Now()
	code, err := s.run(m, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		code = 1
	}
	if s.C != nil && code != 0 {
		for _, r := range s.Replicas {
			fmt.Fprintf(os.Stderr, "--- %s log tail\n%s\n", r.Name, s.TailLog(r.Name, 60))
		}
	}
	StopCluster(s.C, code, 40)
	fmt.Fprintf(os.Stderr, "%s e2e: wall time %s\n", o.Name, time.Since(start).Round(time.Second))
	return code
}

func (s *Suite) run(m *testing.M, o SuiteOptions) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	if s.Dir, err = os.MkdirTemp("", "apportion-e2e-"+o.Name+"-"); err != nil {
		return 1, err
	}
	defer func() { _ = os.RemoveAll(s.Dir) }()
	if s.Bin, err = BuildApportion(ctx, s.Dir, os.Stderr); err != nil {
		return 1, err
	}
	opts := cluster.Options{Karpenter: true, Progress: os.Stderr, LogDir: LogDir(o.Name)}
	if o.Configure != nil {
		if err := o.Configure(ctx, s, &opts); err != nil {
			return 1, err
		}
	}
	if s.C, err = cluster.Start(ctx, opts); err != nil {
		return 1, err
	}
	s.Kube = s.C.Client()
	if o.NodePools {
		if err := Apply(ctx, s.Kube, filepath.Join(RepoRoot(), "test", "testdata", "karpenter")); err != nil {
			return 1, err
		}
	}
	if o.Prepare != nil {
		if err := o.Prepare(ctx, s); err != nil {
			return 1, err
		}
	}
	if err := WaitNodePoolsReady(ctx, s.Kube); err != nil {
		return 1, err
	}
	if o.Chart {
		s.Kubelet = NewKubelet(s.C, s.Bin, filepath.Join(s.Dir, "pods"))
		kctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Kubelet.Run(kctx); close(done) }()
		defer func() { stop(); <-done }()
		return s.ready(ctx, m, o)
	}
	if err := s.Kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SystemNamespace}}); err != nil {
		return 1, err
	}
	s.CertDir = filepath.Join(s.Dir, "certs")
	if err := os.MkdirAll(s.CertDir, 0o700); err != nil {
		return 1, err
	}
	if _, _, err := s.C.IssueServingCert(s.CertDir); err != nil {
		return 1, err
	}
	if s.LB, err = NewBalancer(s.C); err != nil {
		return 1, err
	}
	defer s.LB.Close()
	if err := Register(ctx, s.Kube, s.C.CABundle(), s.LB.Port); err != nil {
		return 1, err
	}
	// The replicas stop before their certificate folder goes.
	defer func() {
		for _, r := range s.Replicas {
			r.Stop()
		}
	}()
	if o.Replicas > 0 {
		if err := s.startReplicas(ctx, o); err != nil {
			return 1, err
		}
	}
	return s.ready(ctx, m, o)
}

// ready runs o.Ready, then the tests.
func (s *Suite) ready(ctx context.Context, m *testing.M, o SuiteOptions) (int, error) {
	if o.Ready != nil {
		if err := o.Ready(ctx, s); err != nil {
			return 1, err
		}
	}
	return m.Run(), nil
}

// startReplicas starts the replicas every test shares, behind the balancer,
// and waits for them to serve and for a leader.
func (s *Suite) startReplicas(ctx context.Context, o SuiteOptions) error {
	ports := make([]int, 0, o.Replicas)
	for i := range o.Replicas {
		r, err := StartReplica(s.C, s.Bin, s.CertDir, fmt.Sprintf("apportion-%d", i+1), o.GateTimeout, o.Args...)
		if err != nil {
			return err
		}
		s.Replicas = append(s.Replicas, r)
		ports = append(ports, r.Port)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, r := range s.Replicas {
		if err := r.WaitReady(wctx); err != nil {
			return fmt.Errorf("%w: %s", err, s.TailLog(r.Name, 20))
		}
	}
	s.LB.Set(ports...)
	for !LeaderAlive(wctx, s.Kube) {
		select {
		case <-wctx.Done():
			return fmt.Errorf("no placement leader: %w", wctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// TailLog returns the last lines of a component's or replica's log.
func (s *Suite) TailLog(name string, lines int) string { return TailLog(s.C, name, lines) }

// TailLog returns the last lines of a component's or replica's log in
// cluster c.
func TailLog(c *cluster.Cluster, name string, lines int) string {
	return TailFile(filepath.Join(c.LogDir(), name+".log"), lines)
}

// TailFile returns the last lines of a file, or why it cannot.
func TailFile(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = f.Close() }()
	var all []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// Run runs cmd and returns its combined output; when ctx ends first, cmd is
// killed and the output so far comes back with ctx's error.
func Run(ctx context.Context, cmd *exec.Cmd) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		return out.String(), err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-errc //nolint:errcheck // killed: its error is the kill's
		return out.String(), ctx.Err()
	}
}

// Helm runs cluster c's helm with the admin kubeconfig, inside the cluster's
// network namespace, with its cache, config and data in the cluster's
// folder, and returns its combined output.
func Helm(ctx context.Context, c *cluster.Cluster, args ...string) (string, error) {
	cmd := c.Command("helm", args...)
	cmd.Env = append(cmd.Env, "HELM_CACHE_HOME="+filepath.Join(c.Dir(), "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(c.Dir(), "helm-config"), "HELM_DATA_HOME="+filepath.Join(c.Dir(), "helm-data"))
	return Run(ctx, cmd)
}

// WaitFor polls check every 250ms until it returns nil, or fails the test
// with check's last error once timeout has passed.
func WaitFor(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("waiting %s for %s: %v", timeout, what, err)
}

// LogDir is the folder a suite's cluster writes its logs to: a folder named
// after the suite under E2E_LOG_DIR when that is set (kept after the run, so
// suites running side by side do not mix their logs), else "" (the
// cluster's own folder, removed with it).
func LogDir(suite string) string {
	root := os.Getenv("E2E_LOG_DIR")
	if root == "" {
		return ""
	}
	return filepath.Join(root, suite)
}

// StartKarpenter builds apportion into dir and starts a cluster with
// Karpenter's kwok provider (logs under LogDir(name)) whose shared NodePools
// (test/testdata/karpenter) are Ready: the set-up of the suites that do not
// run their webhooks from RunSuite. The cluster is returned whenever it
// started, also with an error, for StopCluster.
func StartKarpenter(ctx context.Context, dir, name string) (bin string, c *cluster.Cluster, err error) {
	if bin, err = BuildApportion(ctx, dir, os.Stderr); err != nil {
		return "", nil, err
	}
	if c, err = cluster.Start(ctx, cluster.Options{Karpenter: true, Progress: os.Stderr, LogDir: LogDir(name)}); err != nil {
		return bin, c, err
	}
	kube := c.Client()
	if err := Apply(ctx, kube, filepath.Join(RepoRoot(), "test", "testdata", "karpenter")); err != nil {
		return bin, c, err
	}
	return bin, c, WaitNodePoolsReady(ctx, kube)
}

// StopCluster prints the last lines of every component's log when the
// suite's exit code is not 0, then stops c; a nil c is nothing to stop.
func StopCluster(c *cluster.Cluster, code, lines int) {
	if c == nil {
		return
	}
	if code != 0 {
		c.DumpLogs(os.Stderr, lines)
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping cluster: %v\n", err)
	}
}
