package framework

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/cluster"
)

const (
	// SystemNamespace holds the leader Lease; apportion never mutates it.
	SystemNamespace = "apportion-system"
	// LeaseName is the leader election Lease.
	LeaseName = "apportion-placement"
	// IgnoreLabel on a namespace keeps the API server from calling the pod
	// webhook there (the "without apportion" side of comparisons).
	IgnoreLabel = "e2e.apportion.dev/ignore"
)

// Replica is one `apportion webhook` process inside the cluster's namespace.
type Replica struct {
	Name        string
	Cmd         *exec.Cmd
	Port        int
	MetricsPort int
	HealthPort  int
	done        chan struct{}
	c           *cluster.Cluster
}

// StartReplica starts `apportion webhook` (bin) inside the cluster with its
// serving certificate from certDir (see cluster.IssueServingCert), allowed
// to read this package's Registries (ImageRegistriesArg; extraArgs may name
// another --image-registries, the last one wins). Its log goes to the
// cluster's log folder as name.log.
func StartReplica(c *cluster.Cluster, bin, certDir, name string, gateTimeout time.Duration, extraArgs ...string) (*Replica, error) {
	ports, err := c.FreePorts(3)
	if err != nil {
		return nil, err
	}
	r := &Replica{Name: name, Port: ports[0], MetricsPort: ports[1], HealthPort: ports[2], done: make(chan struct{}), c: c}
	keyFile, err := DecisionKey(certDir)
	if err != nil {
		return nil, err
	}
	args := append([]string{"webhook", "--decision-key-file=" + keyFile,
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(r.Port), "--cert-dir=" + certDir,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(r.MetricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(r.HealthPort),
		"--system-namespace=" + SystemNamespace, "--leader-election-id=" + LeaseName,
		"--gate-timeout=" + gateTimeout.String(), ImageRegistriesArg,
	}, extraArgs...)
	r.Cmd = c.Command(bin, args...)
	if err := c.StartProcess(name, r.Cmd); err != nil {
		return nil, err
	}
	go func() { _ = r.Cmd.Wait(); close(r.done) }()
	return r, nil
}

// DecisionKey returns the decision key file in dir, written once: the
// replicas sharing dir (their certificate folder) sign decisions with one
// key, as the chart's replicas share its Secret.
func DecisionKey(dir string) (string, error) {
	path := filepath.Join(dir, "decision.key")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	key := make([]byte, 24)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(hex.EncodeToString(key)), 0o600); err != nil {
		return "", fmt.Errorf("writing the decision key: %w", err)
	}
	return path, nil
}

// WaitReady waits until the replica answers /readyz.
func (r *Replica) WaitReady(ctx context.Context) error {
	for {
		select {
		case <-r.done:
			return fmt.Errorf("%s exited", r.Name)
		default:
		}
		if _, err := HTTPGet(r.c, fmt.Sprintf("http://127.0.0.1:%d/readyz", r.HealthPort)); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to be ready: %w", r.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop interrupts the replica and waits for it (SIGKILL after 15s).
func (r *Replica) Stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.Cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
		_ = r.Cmd.Process.Kill()
		<-r.done
	}
}

// Kill sends SIGKILL: no lease release, no cleanup.
func (r *Replica) Kill() error { return r.Cmd.Process.Kill() }

// Exited reports whether the process has ended.
func (r *Replica) Exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// IsLeader reads controller-runtime's leader election gauge.
func (r *Replica) IsLeader() bool {
	body, err := HTTPGet(r.c, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.MetricsPort))
	return err == nil && strings.Contains(body, `leader_election_master_status{name="`+LeaseName+`"} 1`)
}

// Metrics returns the replica's Prometheus text.
func (r *Replica) Metrics() (string, error) {
	return HTTPGet(r.c, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.MetricsPort))
}

// LeaderAlive reports whether the placement Lease is held and fresh.
func LeaderAlive(ctx context.Context, kube client.Client) bool {
	return LeaseAlive(ctx, kube, client.ObjectKey{Namespace: SystemNamespace, Name: LeaseName})
}

// LeaseAlive reports whether the Lease key is held and fresh.
func LeaseAlive(ctx context.Context, kube client.Client, key client.ObjectKey) bool {
	var lease coordinationv1.Lease
	if err := kube.Get(ctx, key, &lease); err != nil {
		return false
	}
	s := lease.Spec
	return s.HolderIdentity != nil && *s.HolderIdentity != "" && s.RenewTime != nil && s.LeaseDurationSeconds != nil &&
		time.Since(s.RenewTime.Time) < time.Duration(*s.LeaseDurationSeconds)*time.Second
}

// HTTPGet fetches a URL from inside the cluster's namespace.
func HTTPGet(c *cluster.Cluster, url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), err
}

// PodWebhookName is the name of the pod mutating webhook Register adds (the
// API server's log names it when it fails open).
const PodWebhookName = "pods.apportion.dev"

// Register creates the MutatingWebhookConfiguration (pods) and the
// ValidatingWebhookConfiguration (workloads) for a webhook served at
// https://127.0.0.1:port, as the README's local install does: failure policy
// Ignore, short timeout, reinvocation IfNeeded, side effects NoneOnDryRun,
// and never in the system namespace or namespaces labelled IgnoreLabel.
func Register(ctx context.Context, kube client.Client, caBundle []byte, port int) error {
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	ignore := admissionregistrationv1.Ignore
	nsSelector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: IgnoreLabel, Operator: metav1.LabelSelectorOpDoesNotExist},
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{SystemNamespace}},
	}}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "apportion"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         PodWebhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + "/mutate--v1-pod"), CABundle: caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			FailurePolicy:           &ignore,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       nsSelector,
		}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "apportion"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "workloads.apportion.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + "/validate-apportion-workloads"), CABundle: caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments", "statefulsets", "replicasets"}},
			}, {
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs", "cronjobs"}},
			}, {
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"argoproj.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"rollouts", "workflows"}},
			}},
			FailurePolicy:           &ignore,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       nsSelector,
		}},
	}
	if err := kube.Create(ctx, mutating); err != nil {
		return fmt.Errorf("registering the pod webhook: %w", err)
	}
	if err := kube.Create(ctx, validating); err != nil {
		return fmt.Errorf("registering the workload webhook: %w", err)
	}
	return nil
}

// Balancer stands in for a Service in front of the webhook replicas: it
// listens inside the cluster's namespace and hands each connection to the
// next replica that accepts it.
type Balancer struct {
	Port     int
	l        net.Listener
	mu       sync.Mutex
	backends []int
	next     atomic.Uint64
}

// NewBalancer listens on a free port inside the cluster's namespace.
func NewBalancer(c *cluster.Cluster) (*Balancer, error) {
	l, err := c.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Balancer{l: l, Port: l.Addr().(*net.TCPAddr).Port}
	go b.serve(c)
	return b, nil
}

// Set replaces the backend ports.
func (b *Balancer) Set(ports ...int) {
	b.mu.Lock()
	b.backends = append([]int(nil), ports...)
	b.mu.Unlock()
}

func (b *Balancer) serve(c *cluster.Cluster) {
	for {
		conn, err := b.l.Accept()
		if err != nil {
			return
		}
		go b.relay(c, conn)
	}
}

func (b *Balancer) relay(c *cluster.Cluster, conn net.Conn) {
	defer func() { _ = conn.Close() }()
	b.mu.Lock()
	backends := append([]int(nil), b.backends...)
	b.mu.Unlock()
	start := int(b.next.Add(1))
	for i := range backends {
		port := backends[(start+i)%len(backends)]
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		up, err := c.Dial(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
		cancel()
		if err != nil {
			continue // a dead replica: try the next, as a Service's endpoints would
		}
		go func() { _, _ = io.Copy(up, conn); _ = up.Close() }()
		_, _ = io.Copy(conn, up)
		_ = up.Close()
		return
	}
}

// Close stops listening.
func (b *Balancer) Close() { _ = b.l.Close() }
