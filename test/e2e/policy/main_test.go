//go:build e2e

// Package policy_test runs `apportion webhook` against a real control plane
// with Karpenter's kwok provider (test/cluster) and checks PlacementPolicies
// end to end: a policy places a Deployment that carries no annotation, its
// status shows the split, an edit applies to new pods only, the oldest of two
// policies wins, a workload's own annotation wins, an invalid strategy is
// refused at apply with the parser's message, and seed 001's distribution
// form works.
package policy_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/webhook"
	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	gateTimeout = 30 * time.Second
	replicas    = 2
)

var env struct {
	c        *cluster.Cluster
	kube     client.Client // knows PlacementPolicies
	bin      string
	certDir  string
	lb       *framework.Balancer
	replicas []*framework.Replica
}

func TestMain(m *testing.M) {
	flag.Parse()
	start := time.Now()
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		code = 1
	}
	if env.c != nil {
		if code != 0 {
			for _, r := range env.replicas {
				fmt.Fprintf(os.Stderr, "--- %s log tail\n%s\n", r.Name, tailLog(r.Name, 60))
			}
			env.c.DumpLogs(os.Stderr, 40)
		}
		if err := env.c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping cluster: %v\n", err)
		}
	}
	fmt.Fprintf(os.Stderr, "policy e2e: wall time %s\n", time.Since(start).Round(time.Second))
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp, err := os.MkdirTemp("", "apportion-e2e-policy-")
	if err != nil {
		return 1, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if env.bin, err = framework.BuildApportion(ctx, tmp, os.Stderr); err != nil {
		return 1, err
	}
	env.c, err = cluster.Start(ctx, cluster.Options{Karpenter: true, Progress: os.Stderr, LogDir: os.Getenv("E2E_LOG_DIR")})
	if err != nil {
		return 1, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return 1, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return 1, err
	}
	karpenter := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	scheme.AddKnownTypes(karpenter, &karpv1.NodePool{}, &karpv1.NodePoolList{})
	metav1.AddToGroupVersion(scheme, karpenter)
	if env.kube, err = client.New(env.c.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		return 1, err
	}
	root := framework.RepoRoot()
	if err := framework.Apply(ctx, env.kube, filepath.Join(root, "test", "testdata", "karpenter")); err != nil {
		return 1, err
	}
	if err := framework.Apply(ctx, env.kube, filepath.Join(root, "chart", "crds")); err != nil {
		return 1, err
	}
	if err := waitCRD(ctx); err != nil {
		return 1, err
	}
	if err := framework.WaitNodePoolsReady(ctx, env.kube); err != nil {
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
	if err := registerPolicyWebhook(ctx, env.c.CABundle(), env.lb.Port); err != nil {
		return 1, err
	}
	defer func() {
		for _, r := range env.replicas {
			r.Stop()
		}
	}()
	if err := startReplicas(ctx); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// waitCRD waits until PlacementPolicies can be listed (the CRD is
// established and the client's discovery knows it).
func waitCRD(ctx context.Context) error {
	for {
		var list v1alpha1.PlacementPolicyList
		err := env.kube.List(ctx, &list)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the PlacementPolicy CRD: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// registerPolicyWebhook registers the PlacementPolicy validator by URL, as
// the chart's ValidatingWebhookConfiguration does (failure policy Ignore: a
// policy is never blocked by an unavailable webhook, only refused by one
// that answers).
func registerPolicyWebhook(ctx context.Context, caBundle []byte, port int) error {
	ignore := admissionregistrationv1.Ignore
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "apportion-placementpolicies"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "placementpolicies.apportion.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL: ptr.To("https://127.0.0.1:" + strconv.Itoa(port) + webhook.PolicyValidatorPath), CABundle: caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version},
					Resources: []string{"placementpolicies"}},
			}},
			FailurePolicy:           &ignore,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := env.kube.Create(ctx, cfg); err != nil {
		return fmt.Errorf("registering the PlacementPolicy webhook: %w", err)
	}
	return nil
}

// startReplicas starts the replicas behind the balancer and waits for them
// to serve and for a leader.
func startReplicas(ctx context.Context) error {
	ports := make([]int, 0, replicas)
	for i := range replicas {
		r, err := framework.StartReplica(env.c, env.bin, env.certDir, fmt.Sprintf("apportion-%d", i+1), gateTimeout)
		if err != nil {
			return err
		}
		env.replicas = append(env.replicas, r)
		ports = append(ports, r.Port)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, r := range env.replicas {
		if err := r.WaitReady(wctx); err != nil {
			return fmt.Errorf("%w: %s", err, tailLog(r.Name, 20))
		}
	}
	env.lb.Set(ports...)
	for !framework.LeaderAlive(wctx, env.kube) {
		select {
		case <-wctx.Done():
			return fmt.Errorf("no placement leader: %w", wctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// tailLog returns the last lines of a component's log.
func tailLog(name string, lines int) string {
	f, err := os.Open(filepath.Join(env.c.LogDir(), name+".log"))
	if err != nil {
		return err.Error()
	}
	defer func() { _ = f.Close() }()
	var all []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		all = append(all, s.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// waitFor polls check every 250ms until it returns nil or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, check func() error) {
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
