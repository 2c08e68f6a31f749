//go:build e2e

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// detachedLauncherEnv makes the test binary act as a demo launcher: start
// a detached cluster in the folder it names, print its kubeconfig, exit.
const detachedLauncherEnv = "APPORTION_CLUSTER_TEST_LAUNCH_DETACHED"

func TestMain(m *testing.M) {
	if dir := os.Getenv(detachedLauncherEnv); dir != "" {
		c, err := Start(context.Background(), Options{Karpenter: true, Detached: true, StateDir: dir})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("export KUBECONFIG=" + c.Kubeconfig())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSmoke starts the whole cluster, uses every way in (client, kubectl
// inside the namespace, kubectl on the host, a webhook in the test process),
// gets a pod Running on a node Karpenter launched, then stops the cluster
// and checks that nothing is left behind.
func TestSmoke(t *testing.T) {
	mountsBefore := readMounts(t)
	t0 := time.Now()
	c, err := Start(t.Context(), Options{Karpenter: true, Progress: t.Output()})
	if err != nil {
		t.Fatalf("starting cluster: %v", err)
	}
	t.Logf("TIMING warm start of the whole cluster (etcd, apiserver, controller-manager, scheduler, CRDs, Karpenter, kwok): %s",
		time.Since(t0).Round(10*time.Millisecond))
	stopped := false
	defer func() {
		if !stopped {
			if t.Failed() {
				c.DumpLogs(t.Output(), 40)
			}
			_ = c.Stop()
		}
	}()
	leftovers := recordForLeftovers(t, c)

	ctx := t.Context()
	cl := c.Client()

	t.Run("karpenter CRDs established and Karpenter healthy", func(t *testing.T) {
		for _, name := range []string{"nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh"} {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := cl.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
				t.Fatalf("getting CRD %s: %v", name, err)
			}
			if !crdEstablished(crd) {
				t.Errorf("CRD %s is not Established: %+v", name, crd.Status.Conditions)
			}
		}
		body := httpGet(t, c.HTTPClient(), fmt.Sprintf("http://127.0.0.1:%d/readyz", c.ports.karpenterHealth))
		t.Logf("Karpenter /readyz: %q", body)
		if metrics := httpGet(t, c.HTTPClient(), c.KarpenterMetricsURL()); !strings.Contains(metrics, "karpenter_") {
			t.Errorf("Karpenter metrics have no karpenter_ series")
		}
	})

	t.Run("webhook in the test process is called by the API server", func(t *testing.T) {
		testWebhook(t, c)
	})

	t.Run("pod runs on a node launched by Karpenter", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke"}}
		mustCreate(t, cl, ns)
		mustCreate(t, cl, &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
		mustCreate(t, cl, smokeNodePool())
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: ns.Name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
			}}},
		}
		created := time.Now()
		mustCreate(t, cl, pod)
		waitUntil(t, 3*time.Minute, "pod smoke/smoke Running", func() error {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return err
			}
			if pod.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("phase %q on node %q", pod.Status.Phase, pod.Spec.NodeName)
			}
			return nil
		})
		t.Logf("TIMING pod create -> Running (NodeClaim, Node, kwok): %s", time.Since(created).Round(10*time.Millisecond))
		node := &corev1.Node{}
		if err := cl.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
			t.Fatalf("getting node: %v", err)
		}
		if got := node.Labels[karpv1.NodePoolLabelKey]; got != "smoke" {
			t.Errorf("node %s has NodePool label %q, want smoke", node.Name, got)
		}
	})

	t.Run("kubectl inside the namespace and on the host", func(t *testing.T) {
		out, err := c.Command("kubectl", "get", "pods", "-A", "-o", "name").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "pod/smoke") {
			t.Errorf("kubectl inside the namespace: %v: %s", err, out)
		}
		// A plain process of the host: reaches the API server through the
		// forwarder, with the very same kubeconfig.
		host := exec.CommandContext(ctx, filepath.Join(c.BinDir(), "kubectl"), "--kubeconfig", c.Kubeconfig(), "get", "--raw", "/readyz")
		out, err = host.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Errorf("kubectl on the host: %v: %s", err, out)
		}
	})

	if t.Failed() {
		// Before Stop, which removes the run folder with the logs.
		c.DumpLogs(t.Output(), 40)
	}
	t1 := time.Now()
	err = c.Stop()
	stopped = true
	t.Logf("TIMING stop: %s", time.Since(t1).Round(10*time.Millisecond))
	if err != nil {
		t.Errorf("stopping: %v", err)
	}
	leftovers.check(t, mountsBefore)
}

// TestFailedStartCleansUp makes the API server exit at once and checks that
// Start says which component failed, prints its log tail, and leaves
// nothing behind.
func TestFailedStartCleansUp(t *testing.T) {
	mountsBefore := readMounts(t)
	var progress bytes.Buffer
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "apportion-cluster-*"))
	_, err := Start(t.Context(), Options{APIServerFlags: []string{"--no-such-flag"}, Progress: &progress})
	t.Logf("Start error: %v", err)
	if err == nil {
		t.Fatal("Start succeeded with an unknown API server flag")
	}
	if !strings.Contains(err.Error(), "kube-apiserver exited") {
		t.Errorf("error %q does not say the API server exited", err)
	}
	if !strings.Contains(progress.String(), "==> kube-apiserver") || !strings.Contains(progress.String(), "no-such-flag") {
		t.Errorf("progress output has no API server log tail naming the bad flag:\n%s", progress.String())
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "apportion-cluster-*"))
	for _, dir := range after {
		if !slices.Contains(before, dir) {
			// Another test binary may run a cluster at the same time: only a
			// folder whose components are gone counts as ours and left over.
			if err := scanProcesses(dir, 0); err == nil {
				t.Errorf("run folder %s is left behind", dir)
			}
		}
	}
	if after := readMounts(t); after != mountsBefore {
		t.Errorf("mounts changed")
	}
}

// TestDetachedOutlivesLauncher starts a detached cluster from another
// process that then exits, uses it from the host like the demo's user, and
// stops it with StopDetached.
func TestDetachedOutlivesLauncher(t *testing.T) {
	mountsBefore := readMounts(t)
	stateDir := filepath.Join(t.TempDir(), "demo")
	launcher := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	launcher.Env = append(os.Environ(), detachedLauncherEnv+"="+stateDir)
	var stderr bytes.Buffer
	launcher.Stderr = &stderr
	t0 := time.Now()
	out, err := launcher.Output()
	t.Logf("launcher output:\n%s%s", stderr.String(), out)
	if err != nil {
		t.Fatalf("launching detached cluster: %v", err)
	}
	t.Logf("TIMING detached start incl. launcher process and forwarder build: %s", time.Since(t0).Round(10*time.Millisecond))
	t.Cleanup(func() { _ = StopDetached(stateDir) }) // only does anything if the test failed half-way

	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	kubeconfig, ok := strings.CutPrefix(last, "export KUBECONFIG=")
	if !ok {
		t.Fatalf("the launcher's last line is %q, want an export KUBECONFIG= line", last)
	}
	s, err := readState(stateDir)
	if err != nil {
		t.Fatalf("reading state: %v", err)
	}
	if s.Kubeconfig != kubeconfig {
		t.Errorf("state kubeconfig %q, printed %q", s.Kubeconfig, kubeconfig)
	}
	names := map[string]bool{}
	for _, p := range s.Processes {
		names[p.Name] = true
		if !pidAlive(p.PID, p.StartTime) {
			t.Errorf("%s (pid %d) is not running after the launcher exited", p.Name, p.PID)
		}
	}
	for _, want := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "karpenter", "kwok", "forwarder"} {
		if !names[want] {
			t.Errorf("state has no %s process", want)
		}
	}
	nsIno := nsInode(t, fmt.Sprintf("/proc/%d/ns/net", s.Processes[0].PID))

	kubectl, err := BuildTools(t.Context(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	get := exec.CommandContext(t.Context(), filepath.Join(kubectl, "kubectl"), "get", "crd", "nodepools.karpenter.sh", "-o", "name")
	get.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if out, err := get.CombinedOutput(); err != nil {
		t.Errorf("kubectl on the host with the printed KUBECONFIG: %v: %s", err, out)
	}

	t1 := time.Now()
	if err := StopDetached(stateDir); err != nil {
		t.Errorf("StopDetached: %v", err)
	}
	t.Logf("TIMING StopDetached: %s", time.Since(t1).Round(10*time.Millisecond))
	for _, p := range s.Processes {
		if pidAlive(p.PID, p.StartTime) {
			t.Errorf("%s (pid %d) still runs after StopDetached", p.Name, p.PID)
		}
	}
	for _, path := range []string{s.RunDir, kubeconfig, filepath.Join(stateDir, stateFile), stateDir} {
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left behind (stat: %v)", path, err)
		}
	}
	l := leftovers{runDir: s.RunDir, nsIno: nsIno}
	l.check(t, mountsBefore)
}

// smokeNodePool is the NodePool the smoke pod gets its node from.
// Consolidation is off, as in every suite's NodePools: with Karpenter's
// default (consolidateAfter 0s) a busy machine let Karpenter remove the new
// node as empty before the pod bound, and the pod, bound to a node that was
// gone, was deleted by the pod garbage collector.
func smokeNodePool() *karpv1.NodePool {
	return &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Spec: karpv1.NodePoolSpec{Disruption: karpv1.Disruption{
			ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmpty,
			ConsolidateAfter:    karpv1.MustParseNillableDuration("Never"),
		}, Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.kwok.sh", Kind: "KWOKNodeClass", Name: "default"},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
				{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
				{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
			},
		}}},
	}
}

// testWebhook serves a validating webhook from the test process on a
// listener inside the namespace and checks the API server calls it.
func testWebhook(t *testing.T, c *Cluster) {
	certFile, keyFile, err := c.IssueServingCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening inside the namespace: %v", err)
	}
	wh := &allowAll{}
	srv := &http.Server{Handler: wh}
	go func() { _ = srv.ServeTLS(l, certFile, keyFile) }()
	defer srv.Close()

	cl := c.Client()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "webhook", Labels: map[string]string{"smoke-webhook": "on"}}}
	mustCreate(t, cl, ns)
	url := "https://" + l.Addr().String() + "/validate"
	mustCreate(t, cl, configMapWebhook("smoke", "smoke.apportion.dev",
		admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: c.CABundle()}, ns))
	// The API server picks the configuration up asynchronously.
	waitReviewed(t, cl, ns, "the webhook to be called", wh)
	t.Logf("webhook at %s called %d time(s)", url, wh.calls.Load())
}

// allowAll is a validating webhook that allows every review, counting the
// calls and keeping the Host of the last one.
type allowAll struct {
	calls atomic.Int32
	host  atomic.Value
}

func (a *allowAll) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	review := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	a.calls.Add(1)
	a.host.Store(r.Host)
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	_ = json.NewEncoder(w).Encode(review)
}

// configMapWebhook is the configuration name with one webhook, reached at
// cc, that reviews the creation of ConfigMaps in the namespaces labelled as
// ns is, and fails closed.
func configMapWebhook(name, webhook string, cc admissionregistrationv1.WebhookClientConfig, ns *corev1.Namespace) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         webhook,
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: ns.Labels},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// waitReviewed creates ConfigMaps in ns until wh has reviewed one. With
// failurePolicy Fail, a webhook the API server cannot reach shows up here
// as an error.
func waitReviewed(t *testing.T, cl client.Client, ns *corev1.Namespace, what string, wh *allowAll) {
	t.Helper()
	i := 0
	waitUntil(t, time.Minute, what, func() error {
		i++
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + strconv.Itoa(i), Namespace: ns.Name}}
		if err := cl.Create(t.Context(), cm); err != nil {
			return err
		}
		if wh.calls.Load() == 0 {
			return errors.New("not called yet")
		}
		return nil
	})
}

// leftovers is what a stopped cluster must not leave: processes, its
// network namespace, its run folder, mounts.
type leftovers struct {
	runDir string
	pids   []stateProcess
	nsIno  uint64
}

func recordForLeftovers(t *testing.T, c *Cluster) leftovers {
	l := leftovers{runDir: c.Dir(), nsIno: nsInode(t, c.ns.path())}
	for _, p := range c.procs {
		_, started, err := procStat(p.pid())
		if err != nil {
			t.Fatalf("reading %s: %v", p.name, err)
		}
		l.pids = append(l.pids, stateProcess{Name: p.name, PID: p.pid(), StartTime: started})
	}
	return l
}

func (l leftovers) check(t *testing.T, mountsBefore string) {
	t.Helper()
	for _, p := range l.pids {
		if pidAlive(p.PID, p.StartTime) {
			t.Errorf("%s (pid %d) still runs", p.Name, p.PID)
		}
	}
	if _, err := os.Stat(l.runDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("run folder %s is left behind (stat: %v)", l.runDir, err)
	}
	// The watchdog shell leaves on its own just after Stop: give it a moment.
	waitUntil(t, 10*time.Second, "no process referring to the run folder or the namespace", func() error {
		return scanProcesses(l.runDir, l.nsIno)
	})
	if after := readMounts(t); after != mountsBefore {
		t.Errorf("mounts changed:\nbefore:\n%s\nafter:\n%s", mountsBefore, after)
	}
	t.Logf("leftovers: none (processes, network namespace inode %d, run folder, mounts checked)", l.nsIno)
}

// scanProcesses looks through every command line and environment for the
// run folder, and through this process's threads and descriptors for the
// namespace. Other processes are not searched for the namespace: its inode
// number is reused at once by the next namespace anyone creates.
func scanProcesses(runDir string, nsIno uint64) error {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"cmdline", "environ"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil && bytes.Contains(b, []byte(runDir)) {
				cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
				return fmt.Errorf("%s (%s) refers to %s", p, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}), runDir)
			}
		}
	}
	threads, _ := filepath.Glob("/proc/self/task/*/ns/net")
	for _, th := range threads {
		var st syscall.Stat_t
		if syscall.Stat(th, &st) == nil && st.Ino == nsIno {
			return fmt.Errorf("thread %s of the test process is still in the cluster's network namespace", th)
		}
	}
	fds, _ := filepath.Glob("/proc/self/fd/*")
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && link == fmt.Sprintf("net:[%d]", nsIno) {
			return fmt.Errorf("descriptor %s of the test process still holds the cluster's network namespace", fd)
		}
	}
	return nil
}

func nsInode(t *testing.T, path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

func readMounts(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func crdEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

func mustCreate(t *testing.T, cl client.Client, obj client.Object) {
	t.Helper()
	if err := cl.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func httpGet(t *testing.T, hc *http.Client, url string) string {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body)
}

// waitUntil polls check every half second until it succeeds or timeout
// passes; the timeout only bounds a hang, it asserts nothing about speed.
func waitUntil(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: still failing after %s: %v", what, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
