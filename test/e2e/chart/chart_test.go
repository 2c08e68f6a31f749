//go:build e2e

package chart_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	seed004  = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	capacity = "karpenter.sh/capacity-type"
)

// TestChart walks one release through its life: install, placement through
// the Service, validation, workloads that did not opt in left alone, the
// pod webhook called only where it is needed, RBAC (least privilege: no Secret read outside the release), an upgrade that
// forces short certificate lifetimes and the rotations that follow, a
// SIGTERM of the leader in a burst, the leader lost in a burst (SIGKILL and
// a force-deleted pod), the leader frozen in a burst (SIGSTOP), a real
// Prometheus scraping both replicas and alerting while the leader is
// frozen, the CRD handed to an apportion-crd release and upgraded by it,
// uninstall, and then a release built with make release,
// pushed to a registry in the cluster and installed from it with
// `helm install oci://...`. The steps share the release, so they run in
// order and a failed step stops the rest.
func TestChart(t *testing.T) {
	steps := []struct {
		name string
		run  func(*testing.T)
	}{
		{"Install", testInstall},
		{"Seed004ThroughService", testSeed004},
		{"InvalidStrategyRefused", testInvalidStrategy},
		{"UnannotatedWorkloadsUntouched", testUnannotatedUntouched},
		{"WebhookScope", testWebhookScope},
		{"RBACAllowlist", testRBAC},
		{"CanIGetSecrets", testCanIGetSecrets},
		{"UpgradeAndCertificateRotation", testRotation},
		{"SIGTERMLeaderDuringBurst", testSIGTERM},
		{"ForceDeletedLeaderDuringBurst", testForceDeletedLeader},
		{"FrozenLeaderDuringBurst", testFrozenLeader},
		{"PrometheusNoLeaderAlert", testPrometheus},
		{"CRDUpgrade", testCRDUpgrade},
		{"Uninstall", testUninstall},
		{"InstallFromOCIRegistry", testInstallFromOCIRegistry},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("step %s failed; later steps depend on it", s.name)
		}
	}
}

var installStart time.Time

func testInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	installStart = time.Now()
	out, err := helm(ctx, "install", release, chartDir(), "-n", namespace, "--create-namespace",
		"-f", testdata("values.yaml"), "--wait", "--timeout", "5m")
	if err != nil {
		t.Fatalf("helm install: %v\n%s\nkubelet:\n%s", err, out, logTail("kubelet", 30))
	}
	t.Logf("helm install --wait took %s", time.Since(installStart).Round(time.Millisecond))

	// Both replicas run as the chart's pods, each on its own IP. helm's
	// --wait needs only one: the strategy's maxUnavailable is 1, and the
	// second replica waits for a node of its own (hostname anti-affinity).
	var procs map[string]*framework.PodProcess
	waitFor(t, 2*time.Minute, "the chart's 2 replicas running", func() error {
		if procs = env.kubelet.Processes(); len(procs) != 2 {
			return fmt.Errorf("%d running", len(procs))
		}
		return nil
	})
	// The webhook configurations point at the Service, and apportion has
	// injected its CA into them.
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.kube.Get(ctx, client.ObjectKey{Name: release}, &mwc); err != nil {
		t.Fatal(err)
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.kube.Get(ctx, client.ObjectKey{Name: release}, &vwc); err != nil {
		t.Fatal(err)
	}
	secret := certSecret(t)
	waitFor(t, time.Minute, "the CA in both webhook configurations", func() error {
		if err := env.kube.Get(ctx, client.ObjectKey{Name: release}, &mwc); err != nil {
			return err
		}
		if err := env.kube.Get(ctx, client.ObjectKey{Name: release}, &vwc); err != nil {
			return err
		}
		secret = certSecret(t)
		var cc []admissionregistrationv1.WebhookClientConfig
		for _, w := range mwc.Webhooks {
			cc = append(cc, w.ClientConfig)
		}
		for _, w := range vwc.Webhooks {
			cc = append(cc, w.ClientConfig)
		}
		for _, c := range cc {
			if c.URL != nil || c.Service == nil || c.Service.Namespace != namespace {
				return fmt.Errorf("client config %+v does not reference the chart's Service", c)
			}
			if !strings.Contains(string(c.CABundle), strings.TrimSpace(string(secret.Data["ca.crt"]))) {
				return errors.New("caBundle does not hold the Secret's ca.crt")
			}
		}
		return nil
	})
	for _, w := range mwc.Webhooks {
		if *w.FailurePolicy != admissionregistrationv1.Ignore || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy || *w.TimeoutSeconds != 2 {
			t.Errorf("mutating webhook %s: failurePolicy %s, reinvocation %s, timeout %d", w.Name, *w.FailurePolicy, *w.ReinvocationPolicy, *w.TimeoutSeconds)
		}
	}
	var rollouts bool
	for _, w := range vwc.Webhooks {
		for _, r := range w.Rules {
			rollouts = rollouts || slices.Contains(r.APIGroups, "argoproj.io") && slices.Contains(r.Resources, "rollouts")
		}
	}
	if !rollouts {
		t.Errorf("the validating webhook does not cover argoproj.io rollouts: %+v", vwc.Webhooks)
	}
}

func certSecret(t *testing.T) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := env.kube.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: release + "-cert"}, &s); err != nil {
		t.Fatalf("reading the certificate Secret: %v", err)
	}
	return &s
}

func testSeed004(t *testing.T) {
	ns := newNamespace(t, "seed004")
	d := deployment(ns, "nginx", 10, map[string]string{"custom-pod-schedule-strategy": seed004})
	create(t, d)
	first := waitDecided(t, ns, "nginx", 1, time.Minute)
	t.Logf("helm install to first placement: %s", first.Sub(installStart).Round(time.Millisecond))
	pods := waitRunning(t, ns, "nginx", 10, 3*time.Minute)
	counts := countByNode(t, pods, capacity)
	t.Logf("seed 004 at 10 replicas, by node label %s: %v", capacity, counts)
	if counts["on-demand"] != 4 || counts["spot"] != 6 {
		t.Fatalf("want on-demand 4, spot 6 by node labels, got %v", counts)
	}
	for _, p := range pods {
		if p.Annotations[annotations.Group] == "" {
			t.Errorf("pod %s has no decision", p.Name)
		}
	}
}

func testInvalidStrategy(t *testing.T) {
	ns := newNamespace(t, "invalid")
	d := deployment(ns, "bad", 1, map[string]string{annotations.Strategy: "karpenter.sh/capacity-type=spot,weight=three"})
	err := env.kube.Create(t.Context(), d)
	if err == nil {
		t.Fatal("a Deployment with an invalid strategy was accepted")
	}
	if !strings.Contains(err.Error(), "weight") || !strings.Contains(err.Error(), "three") {
		t.Fatalf("want the parser's message naming the bad item, got: %v", err)
	}
	t.Logf("refused at apply: %v", err)
}

func testRBAC(t *testing.T) {
	sa := "system:serviceaccount:" + namespace + ":" + release
	var got strings.Builder
	for _, ns := range []string{namespace, "default"} {
		out, err := kubectl("auth", "can-i", "--list", "--as", sa, "-n", ns)
		if err != nil {
			t.Fatalf("kubectl auth can-i --list -n %s: %v\n%s", ns, err, out)
		}
		fmt.Fprintf(&got, "# kubectl auth can-i --list --as %s -n %s\n%s", sa, ns, normalizeCanI(out))
	}
	path := testdata("rbac-allowlist.txt")
	if *update {
		if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the allowlist (run with -update to write it): %v", err)
	}
	if got.String() != string(want) {
		t.Fatalf("the chart's ServiceAccount may do other things than %s allows (a new permission must be a visible diff there):\n--- got\n%s\n--- want\n%s", path, got.String(), want)
	}
	for _, line := range strings.Split(got.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "*" || strings.HasPrefix(f[0], "*.") || strings.Contains(line, "[*]")) {
			t.Errorf("wildcard permission: %s", line)
		}
		// Secrets and ServiceAccounts: the default install touches only
		// its certificate Secret, by name; the pods' image pull secrets
		// (and their ServiceAccounts) are read only with
		// settings.readPullSecrets.
		if len(f) > 0 && f[0] == "secrets" && !strings.Contains(line, "["+release+"-cert]") {
			t.Errorf("Secret access beyond the certificate Secret: %s", line)
		}
		if len(f) > 0 && f[0] == "serviceaccounts" {
			t.Errorf("ServiceAccount access in the default install: %s", line)
		}
	}
}

// normalizeCanI squeezes the table's spaces so that column widths do not
// make a diff.
func normalizeCanI(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		b.WriteString(strings.Join(strings.Fields(line), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// testRotation upgrades the release with changed settings (short
// certificate lifetimes) and checks that the pods rolled with the new
// environment; then, while pods keep being admitted, the certificates are
// rotated several times and every admission succeeds, with no process
// restarted: the replicas serve the new certificate from the same process.
func testRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	before := env.kubelet.Processes()
	out, err := helm(ctx, "upgrade", release, chartDir(), "-n", namespace, "-f", testdata("values.yaml"),
		"-f", testdata("values-short-certs.yaml"), "--wait", "--timeout", "4m")
	if err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	var d appsv1.Deployment
	if err := env.kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release}, &d); err != nil {
		t.Fatal(err)
	}
	envOf := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		envOf[e.Name] = e.Value
	}
	if envOf["CERT_VALIDITY"] != "2m" || envOf["CA_VALIDITY"] != "4m" || envOf["CERT_RENEW_BEFORE"] != "80s" {
		t.Fatalf("the upgraded Deployment does not carry the changed settings: %v", envOf)
	}
	// The pods rolled: two new processes, the old ones gone.
	waitFor(t, 2*time.Minute, "two new replicas and none of the old", func() error {
		now := env.kubelet.Processes()
		for name := range before {
			if _, ok := now[name]; ok {
				return fmt.Errorf("old replica %s still runs", name)
			}
		}
		if len(now) != 2 {
			return fmt.Errorf("%d replicas", len(now))
		}
		return nil
	})
	procs := env.kubelet.Processes()

	// The serving certificate now lives 2 minutes and is renewed 80 s before
	// its end; the CA lives 4. Watch until both were replaced at least once
	// while a pod is created every second.
	ns := newNamespace(t, "rotation")
	create(t, deployment(ns, "churn", 1, map[string]string{annotations.Strategy: seed004}))
	first := certSecret(t)
	firstCA, firstServing := string(first.Data["ca.crt"]), string(first.Data["tls.crt"])
	servingSeen := map[string]bool{serial(t, first.Data["tls.crt"]): true}
	replicas := int32(1)
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		s := certSecret(t)
		servingSeen[serial(t, s.Data["tls.crt"])] = true
		if string(s.Data["ca.crt"]) != firstCA && len(servingSeen) >= 3 {
			break
		}
		if replicas < 60 {
			replicas++
			scale(t, ns, "churn", replicas)
		}
		time.Sleep(2 * time.Second)
	}
	last := certSecret(t)
	if string(last.Data["tls.crt"]) == firstServing || string(last.Data["ca.crt"]) == firstCA {
		t.Fatalf("certificates were not rotated within 5 minutes (serving certificates seen: %d)", len(servingSeen))
	}
	t.Logf("serving certificates seen: %d, CA rotated: yes, pods admitted meanwhile: %d", len(servingSeen), replicas)
	// Every replica serves the Secret's current certificate, from the
	// process it had before the rotations.
	waitFor(t, 90*time.Second, "every replica serving the current certificate", func() error {
		cur := certSecret(t)
		for name, p := range procs {
			if now, ok := env.kubelet.Processes()[name]; !ok || now.Cmd.Process.Pid != p.Cmd.Process.Pid {
				return fmt.Errorf("replica %s was restarted or stopped", name)
			}
			got, err := servedSerial(p.IP)
			if err != nil {
				return fmt.Errorf("replica %s: %w", name, err)
			}
			if want := serial(t, cur.Data["tls.crt"]); got != want {
				return fmt.Errorf("replica %s serves certificate %s, the Secret holds %s", name, got, want)
			}
		}
		return nil
	})
	// And every pod created during the rotations got a decision.
	pods := waitDecidedAll(t, ns, "churn", int(replicas), 2*time.Minute)
	counts := map[string]int{}
	for _, p := range pods {
		counts[p.Annotations[annotations.Group]]++
	}
	t.Logf("%d pods admitted during the rotations, all with a decision: %v", len(pods), counts)
}

// serial is a PEM certificate's serial number and NotBefore, enough to tell
// two certificates apart.
func serial(t *testing.T, certPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String() + "@" + c.NotBefore.UTC().Format(time.RFC3339)
}

// servedSerial connects to a replica's webhook port and returns the
// certificate it serves.
func servedSerial(ip string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	raw, err := env.c.Dial(ctx, "tcp", net.JoinHostPort(ip, "9443"))
	if err != nil {
		return "", err
	}
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reading the served certificate only
	defer func() { _ = conn.Close() }()
	if err := conn.HandshakeContext(ctx); err != nil {
		return "", err
	}
	c := conn.ConnectionState().PeerCertificates[0]
	return c.SerialNumber.String() + "@" + c.NotBefore.UTC().Format(time.RFC3339), nil
}

// testSIGTERM scales a Deployment from 0 to 200 and, once pods are being
// admitted, deletes the placement leader's pod: the kubelet runs its preStop
// sleep (the Service's endpoints drop it meanwhile) and then sends SIGTERM.
// Not one of the 200 pods may end up without a decision: in-flight
// admissions drain, and the other replica takes the Lease and keeps gating.
func testSIGTERM(t *testing.T) {
	ns := newNamespace(t, "sigterm")
	create(t, deployment(ns, "burst", 0, map[string]string{annotations.Strategy: seed004}))
	leader := leaderProcess(t)
	start := time.Now()
	scale(t, ns, "burst", 200)
	waitFor(t, time.Minute, "20 pods of the burst admitted", func() error {
		if n := len(listPods(t, ns, "burst")); n < 20 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	var pod corev1.Pod
	if err := env.kube.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: leader.Name}, &pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the leader's endpoint ready", func() error {
		var list discoveryv1.EndpointSliceList
		if err := env.kube.List(t.Context(), &list, client.InNamespace(namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: release}); err != nil {
			return err
		}
		if !readyEndpoint(list.Items, leader.IP) {
			return fmt.Errorf("%s is not a ready endpoint of Service %s", leader.IP, release)
		}
		return nil
	})
	deleted := time.Now()
	if err := env.kube.Delete(t.Context(), &pod); err != nil {
		t.Fatalf("deleting the leader's pod: %v", err)
	}
	t.Logf("deleted the leader's pod %s %s after the scale-up", leader.Name, time.Since(start).Round(time.Millisecond))
	// How long the API server still sent admissions to the leaving pod: its
	// preStop sleep must cover it, or requests meet a closed port and fail open.
	dropped := endpointDrop(leader.IP, deleted)
	select {
	case <-leader.Exited:
	case <-time.After(time.Minute):
		t.Fatal("the leader's process did not exit within a minute of its pod's deletion")
	}
	if !leader.Stopping() {
		t.Fatal("the leader's process ended without the kubelet's SIGTERM")
	}
	if code := leader.ExitCode(); code != 0 {
		t.Errorf("the leader exited with status %d after SIGTERM, want 0:\n%s", code, logTail(leader.LogName, 20))
	}
	pods := waitRunning(t, ns, "burst", 200, 5*time.Minute)
	// The gate janitor releases a pod without a decision and tells so with
	// a PlacementTimeout Event on the pod.
	released := map[string]bool{}
	var evs corev1.EventList
	if err := env.kube.List(t.Context(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "PlacementTimeout" {
			released[e.InvolvedObject.Name] = true
		}
	}
	var undecided, timedOut []string
	counts := map[string]int{}
	for _, p := range pods {
		switch {
		case released[p.Name]:
			timedOut = append(timedOut, p.Name)
		case p.Annotations[annotations.Group] == "":
			undecided = append(undecided, p.Name)
		default:
			counts[p.Annotations[annotations.Group]]++
		}
	}
	t.Logf("200 pods in %s, the leader SIGTERMed mid-burst: %d without a decision, %d released by timeout, by group %v",
		time.Since(start).Round(time.Millisecond), len(undecided), len(timedOut), counts)
	drop := <-dropped
	t.Logf("the leader's endpoint was no longer ready %s after its pod's deletion (preStop sleep %s)", drop, leader.PreStop())
	if len(undecided) > 0 || len(timedOut) > 0 {
		t.Fatalf("pods admitted without a decision: %v; released by the janitor: %v\nthe API server failing open since the scale-up:\n%s\nthe leader (exit %d):\n%s",
			undecided, timedOut, failingOpen(start), leader.ExitCode(), logTail(leader.LogName, 15))
	}
}

// failingOpen sums up the API server's "failing open" warnings about
// apportion's webhooks logged since start: how many, and why.
func failingOpen(start time.Time) string {
	reasons, first, last, err := failingOpenReasons(start)
	if err != nil {
		return err.Error()
	}
	if len(reasons) == 0 {
		return "  none"
	}
	var out []string
	for r, n := range reasons {
		out = append(out, fmt.Sprintf("  %d× %s", n, r))
	}
	sort.Strings(out)
	return fmt.Sprintf("  from %s to %s\n%s", first, last, strings.Join(out, "\n"))
}

// failingOpenReasons counts the API server's "failing open" warnings about
// apportion's webhooks logged since start by reason, with the times of the
// first and the last.
func failingOpenReasons(start time.Time) (reasons map[string]int, first, last string, err error) {
	b, err := os.ReadFile(filepath.Join(env.c.LogDir(), "kube-apiserver.log"))
	if err != nil {
		return nil, "", "", err
	}
	reasons = map[string]int{}
	for line := range strings.SplitSeq(string(b), "\n") {
		_, msg, ok := strings.Cut(line, "failing open ")
		if !ok || !strings.Contains(msg, "apportion.dev") || len(line) < 21 {
			continue
		}
		// klog: "W1123 07:16:30.900327 ..."; the year is the test's.
		at, perr := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.UTC)
		if perr != nil || at.AddDate(start.UTC().Year(), 0, 0).Before(start.UTC()) {
			continue
		}
		if first == "" {
			first = line[1:21]
		}
		last = line[1:21]
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
		reasons[msg]++
	}
	return reasons, first, last, nil
}

// endpointDrop reports, once, how long after since the Service's
// EndpointSlices stopped listing ip as ready (the API server's webhook
// client only dials ready endpoints), or -1 if that took over a minute.
func endpointDrop(ip string, since time.Time) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			var list discoveryv1.EndpointSliceList
			err := env.kube.List(context.Background(), &list, client.InNamespace(namespace),
				client.MatchingLabels{discoveryv1.LabelServiceName: release})
			if err == nil && !readyEndpoint(list.Items, ip) {
				out <- time.Since(since).Round(100 * time.Millisecond)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		out <- -1
	}()
	return out
}

func readyEndpoint(items []discoveryv1.EndpointSlice, ip string) bool {
	for _, s := range items {
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, true) && slices.Contains(e.Addresses, ip) {
				return true
			}
		}
	}
	return false
}

// leaderProcess is the replica holding the placement Lease.
func leaderProcess(t *testing.T) *framework.PodProcess {
	t.Helper()
	var leader *framework.PodProcess
	waitFor(t, time.Minute, "a placement leader among the chart's pods", func() error {
		var lease coordinationv1.Lease
		if err := env.kube.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: release}, &lease); err != nil {
			return err
		}
		for _, p := range env.kubelet.Processes() {
			body, err := framework.HTTPGet(env.c, "http://"+net.JoinHostPort(p.IP, "8080")+"/metrics")
			if err == nil && strings.Contains(body, `leader_election_master_status{name="`+release+`"} 1`) {
				leader = p
				return nil
			}
		}
		return fmt.Errorf("no replica reports itself leader (lease holder %v)", ptr.Deref(lease.Spec.HolderIdentity, ""))
	})
	return leader
}

// testUninstall stops apportion, leaves pods holding the placement gate
// behind (as a crash would), and uninstalls: the pre-delete hook's
// `apportion release-gates` frees them, and no webhook configuration
// remains.
func testUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if out, err := kubectl("-n", namespace, "scale", "deployment", release, "--replicas=0"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// Processes() leaves out processes already told to stop, but a replica
	// in its preStop sleep still runs its controllers: wait until every
	// process of the release has exited, or the leader releases the
	// leftover pods below before the hook can.
	waitFor(t, 2*time.Minute, "apportion's processes to exit", func() error {
		var running []string
		for _, p := range env.kubelet.All() {
			select {
			case <-p.Exited:
			default:
				if p.Namespace == namespace {
					running = append(running, p.Name)
				}
			}
		}
		if len(running) > 0 {
			return fmt.Errorf("still running: %v", running)
		}
		return nil
	})
	ns := newNamespace(t, "leftover")
	const left = 3
	for i := range left {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gated-%d", i)},
			Spec: corev1.PodSpec{
				SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/other"}, {Name: annotations.PlacementGate}},
				Containers:      []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			},
		}
		create(t, p)
	}
	out, err := helm(ctx, "uninstall", release, "-n", namespace, "--wait", "--timeout", "4m")
	if err != nil {
		t.Fatalf("helm uninstall: %v\n%s\nkubelet:\n%s", err, out, logTail("kubelet", 30))
	}
	// The hook ran as the chart's Job, with the chart's ServiceAccount.
	var hook *framework.PodProcess
	for _, p := range env.kubelet.All() {
		if p.Namespace == namespace && strings.Contains(strings.Join(p.Cmd.Args, " "), "release-gates") {
			hook = p
		}
	}
	if hook == nil {
		t.Fatal("no pre-delete hook pod ran `apportion release-gates`")
	}
	hookLog, _ := os.ReadFile(env.c.LogDir() + "/" + hook.LogName + ".log")
	t.Logf("pre-delete hook: %s", strings.TrimSpace(string(hookLog)))
	if !strings.Contains(string(hookLog), fmt.Sprintf("released %d pod", left)) {
		t.Errorf("want the hook to release %d pods, its output: %s", left, hookLog)
	}
	var mwcs admissionregistrationv1.MutatingWebhookConfigurationList
	var vwcs admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := env.kube.List(ctx, &mwcs); err != nil {
		t.Fatal(err)
	}
	if err := env.kube.List(ctx, &vwcs); err != nil {
		t.Fatal(err)
	}
	if len(mwcs.Items)+len(vwcs.Items) != 0 {
		t.Errorf("webhook configurations left after uninstall: %d mutating, %d validating", len(mwcs.Items), len(vwcs.Items))
	}
	var all corev1.PodList
	if err := env.kube.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, p := range all.Items {
		for _, g := range p.Spec.SchedulingGates {
			if g.Name == annotations.PlacementGate {
				t.Errorf("pod %s/%s still holds the placement gate", p.Namespace, p.Name)
			}
		}
		if p.Namespace == ns && len(p.Spec.SchedulingGates) != 1 {
			t.Errorf("pod %s/%s: want only its other gate kept, got %v", p.Namespace, p.Name, p.Spec.SchedulingGates)
		}
	}
}

// --- helpers -------------------------------------------------------------

var nsSeq int

func newNamespace(t *testing.T, name string) string {
	t.Helper()
	nsSeq++
	name = fmt.Sprintf("chart-%d-%s", nsSeq, name)
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	framework.Create(t, env.kube, obj)
}

func deployment(ns, name string, replicas int32, ann map[string]string) *appsv1.Deployment {
	return framework.Deployment(ns, name, replicas, ann, framework.AppPodSpec("public.ecr.aws/nginx/nginx:latest"))
}

func scale(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	framework.Scale(t, env.kube, client.ObjectKey{Namespace: ns, Name: name}, replicas)
}

func listPods(t *testing.T, ns, app string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := env.kube.List(t.Context(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// waitDecided waits until n pods carry a decision and returns when the
// first was seen.
func waitDecided(t *testing.T, ns, app string, n int, timeout time.Duration) time.Time {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%d decided pods", n), func() error {
		got := 0
		for _, p := range listPods(t, ns, app) {
			if p.Annotations[annotations.Group] != "" {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d decided", got)
		}
		return nil
	})
	return time.Now()
}

// waitDecidedAll waits until n pods exist and none is gated, and returns
// them; each must carry a decision.
func waitDecidedAll(t *testing.T, ns, app string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, timeout, fmt.Sprintf("%d pods out of the gate", n), func() error {
		pods = listPods(t, ns, app)
		if len(pods) != n {
			return fmt.Errorf("%d pods", len(pods))
		}
		for _, p := range pods {
			if len(p.Spec.SchedulingGates) > 0 {
				return fmt.Errorf("pod %s still gated", p.Name)
			}
		}
		return nil
	})
	var undecided []string
	for _, p := range pods {
		if p.Annotations[annotations.Group] == "" {
			undecided = append(undecided, p.Name)
		}
	}
	if len(undecided) > 0 {
		sort.Strings(undecided)
		t.Fatalf("pods admitted without a decision: %v", undecided)
	}
	return pods
}

func waitRunning(t *testing.T, ns, app string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, timeout, fmt.Sprintf("%d Running pods", n), func() error {
		pods = listPods(t, ns, app)
		running := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				running++
			}
		}
		if running != n || len(pods) != n {
			return fmt.Errorf("%d of %d pods Running", running, len(pods))
		}
		return nil
	})
	return pods
}

// countByNode counts pods by a label of the node each runs on.
func countByNode(t *testing.T, pods []corev1.Pod, label string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, p := range pods {
		var node corev1.Node
		if err := env.kube.Get(t.Context(), client.ObjectKey{Name: p.Spec.NodeName}, &node); err != nil {
			t.Fatal(err)
		}
		counts[node.Labels[label]]++
	}
	return counts
}
