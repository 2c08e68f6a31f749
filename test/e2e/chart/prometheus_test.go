//go:build e2e

package chart_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/apportion-dev/apportion/test/framework"
)

// noLeaderFor replaces the `for:` of ApportionNoLeader in the rendered rule
// (5m): the placement Lease is taken over 15-17s after its holder stopped,
// so the alert must fire well inside that window.
const noLeaderFor = "3s"

// testPrometheus runs a real Prometheus (built by test/tools/build.sh) in
// the cluster's network namespace, listening on 127.0.0.1 only. It scrapes
// both replicas as the chart's ServiceMonitor has the Prometheus Operator
// scrape them (the same port, path and scheme, the Service's name as job,
// the Operator's target labels) and evaluates the chart's rendered
// PrometheusRule, with ApportionNoLeader's `for:` shortened to noLeaderFor.
// The placement leader is frozen (SIGSTOP): ApportionNoLeader fires, and
// resolves once the other replica has taken the Lease.
func testPrometheus(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	monitor, rule := renderMonitoring(t)

	// The ServiceMonitor's endpoint: a named container port, a path and a
	// scheme (http unless it says otherwise).
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(endpoints))
	}
	ep := endpoints[0].(map[string]any)
	portName, _ := ep["port"].(string)
	path, _ := ep["path"].(string)
	scheme, _ := ep["scheme"].(string)
	if scheme == "" {
		scheme = "http"
	}
	var targets []map[string]any
	for _, p := range env.kubelet.Processes() {
		var pod corev1.Pod
		if err := env.kube.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, &pod); err != nil {
			t.Fatal(err)
		}
		port, container := 0, ""
		for _, c := range pod.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == portName {
					port, container = int(cp.ContainerPort), c.Name
				}
			}
		}
		if port == 0 {
			t.Fatalf("pod %s has no container port %q", p.Name, portName)
		}
		targets = append(targets, map[string]any{
			"targets": []string{net.JoinHostPort(p.IP, strconv.Itoa(port))},
			"labels": map[string]string{
				"namespace": p.Namespace, "service": release, "pod": p.Name,
				"container": container, "endpoint": portName,
			},
		})
	}
	if len(targets) != 2 {
		t.Fatalf("%d replicas running, want 2", len(targets))
	}

	// The rule file: the PrometheusRule's groups, ApportionNoLeader waiting
	// noLeaderFor instead of its 5m.
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	shortened := false
	groups, _ := spec["groups"].([]any)
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			if r := r.(map[string]any); r["alert"] == "ApportionNoLeader" {
				r["for"] = noLeaderFor
				shortened = true
			}
		}
	}
	if !shortened {
		t.Fatal("the PrometheusRule has no alert ApportionNoLeader")
	}
	writeYAML(t, filepath.Join(dir, "rules.yaml"), spec)
	writeYAML(t, filepath.Join(dir, "prometheus.yaml"), map[string]any{
		"global": map[string]any{
			"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s",
		},
		"rule_files": []string{"rules.yaml"},
		"scrape_configs": []any{map[string]any{
			// The Operator sets job to the Service's name.
			"job_name":       release,
			"metrics_path":   path,
			"scheme":         scheme,
			"static_configs": targets,
		}},
	})

	ports, err := env.c.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	cmd := env.c.Command("prometheus", "--config.file="+filepath.Join(dir, "prometheus.yaml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		"--log.level=warn")
	if err := env.c.StartProcess("prometheus", cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	defer func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logTail("prometheus", 30))
		}
	}()

	waitFor(t, time.Minute, "Prometheus scraping both replicas", func() error {
		var r struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
			} `json:"activeTargets"`
		}
		if err := promAPI(base, "/api/v1/targets", &r); err != nil {
			return err
		}
		up := 0
		for _, tg := range r.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
		}
		if up != 2 {
			return fmt.Errorf("%d of %d targets up: %+v", up, len(r.ActiveTargets), r.ActiveTargets)
		}
		return nil
	})
	waitFor(t, time.Minute, "Prometheus seeing the placement leader", func() error {
		var r struct {
			Result []json.RawMessage `json:"result"`
		}
		q := `max(leader_election_master_status{namespace="` + namespace + `", name="` + release + `"}) == 1`
		if err := promAPI(base, "/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
			return err
		}
		if len(r.Result) != 1 {
			return fmt.Errorf("%s: %d results", q, len(r.Result))
		}
		return nil
	})
	// Until Prometheus has scraped the leader once, the rule may have seen
	// no leader: the alert is pending at first, and must go.
	waitFor(t, 30*time.Second, "ApportionNoLeader inactive while a replica leads", func() error {
		state, err := alertState(base, "ApportionNoLeader")
		if err != nil {
			return err
		}
		if state != "" {
			return fmt.Errorf("ApportionNoLeader is %q", state)
		}
		return nil
	})

	leader := leaderProcess(t)
	holder := leaseHolder(t)
	stopped, thaw := freeze(t, leader)
	t.Logf("froze the leader %s (SIGSTOP)", leader.Name)

	waitAlert(t, base, "ApportionNoLeader", "firing")
	fired := time.Now()
	t.Logf("ApportionNoLeader firing %s after the leader froze (Lease holder now %s)", fired.Sub(stopped).Round(100*time.Millisecond), leaseHolder(t))

	waitAlert(t, base, "ApportionNoLeader", "")
	if h := leaseHolder(t); h == holder {
		t.Fatalf("ApportionNoLeader resolved while the frozen replica %s still holds the Lease", holder)
	}
	t.Logf("ApportionNoLeader resolved %s after it fired, the Lease taken over by %s", time.Since(fired).Round(100*time.Millisecond), leaseHolder(t))

	// Back to two replicas for the steps after this one: the thawed replica
	// steps down, or exits, and the stand-in kubelet does not restart it.
	thaw()
	waitFor(t, time.Minute, "the thawed replica running on or exited", func() error {
		select {
		case <-leader.Exited:
			return nil
		default:
		}
		if !isReadyEndpoint(t, leader.IP) {
			return fmt.Errorf("%s not a ready endpoint yet", leader.IP)
		}
		return nil
	})
	replaceIfExited(t, leader)
}

// renderMonitoring renders the chart with the install's values and its
// ServiceMonitor and PrometheusRule on, and returns those two.
func renderMonitoring(t *testing.T) (monitor, rule *unstructured.Unstructured) {
	t.Helper()
	args := []string{"template", release, chartDir(), "-n", namespace, "-f", testdata("values.yaml"),
		"--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--kube-version", "1.36.0"}
	cmd := env.c.Command("helm", args...)
	cmd.Env = append(cmd.Env, "HELM_CACHE_HOME="+filepath.Join(env.c.Dir(), "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(env.c.Dir(), "helm-config"), "HELM_DATA_HOME="+filepath.Join(env.c.Dir(), "helm-data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, stderr.String())
	}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := docs.Read()
		if err != nil {
			break
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		switch u.GetKind() {
		case "ServiceMonitor":
			monitor = u
		case "PrometheusRule":
			rule = u
		}
	}
	if monitor == nil || rule == nil {
		t.Fatalf("helm template rendered ServiceMonitor %v, PrometheusRule %v", monitor != nil, rule != nil)
	}
	return monitor, rule
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// promAPI gets a Prometheus HTTP API path and decodes its data into v.
func promAPI(base, path string, v any) error {
	body, err := framework.HTTPGet(env.c, base+path)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s: %s %s", path, r.Status, r.Error)
	}
	return json.Unmarshal(r.Data, v)
}

// waitAlert waits up to a minute for alert name to be in state ("" when
// it is neither pending nor firing).
func waitAlert(t *testing.T, base, name, state string) {
	t.Helper()
	what := name + " " + state
	if state == "" {
		what = name + " resolved"
	}
	waitFor(t, time.Minute, what, func() error {
		got, err := alertState(base, name)
		if err != nil {
			return err
		}
		if got != state {
			return fmt.Errorf("%s is %q", name, got)
		}
		return nil
	})
}

// alertState returns the state of an alert in /api/v1/alerts (pending or
// firing), empty when it is not active.
func alertState(base, name string) (string, error) {
	var r struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := promAPI(base, "/api/v1/alerts", &r); err != nil {
		return "", err
	}
	state := ""
	for _, a := range r.Alerts {
		if a.Labels["alertname"] == name && (state == "" || a.State == "firing") {
			state = a.State
		}
	}
	return state, nil
}
