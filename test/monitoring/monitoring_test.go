//go:build chart

package monitoring

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/test/helmbin"
)

var (
	chartDir      = filepath.Join("..", "..", "chart")
	dashboardFile = filepath.Join(chartDir, "files", "apportion-dashboard.json")
	promql        = parser.NewParser(parser.Options{})
)

// allowed lists the series apportion does not register itself that the
// dashboard and alerts may use: controller-runtime's own metrics, and up,
// which Prometheus writes for every target.
var allowed = map[string]bool{
	"leader_election_master_status":             true,
	"controller_runtime_webhook_requests_total": true,
	"up": true,
}

func TestMain(m *testing.M) {
	code := m.Run()
	helmbin.Cleanup()
	os.Exit(code)
}

// recorder stands in for controller-runtime's registry while
// metrics.Register runs, and notes what is registered.
type recorder struct {
	*prometheus.Registry
	names      map[string]bool
	histograms map[string]bool
	labels     map[string][]string // variable label names by metric name
}

var (
	fqName         = regexp.MustCompile(`fqName: "([^"]+)"`)
	variableLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	_, hist := c.(prometheus.Histogram)
	if _, ok := c.(*prometheus.HistogramVec); ok {
		hist = true
	}
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		r.names[m[1]] = true
		r.labels[m[1]] = descLabels(d.String())
		if hist {
			r.histograms[m[1]] = true
		}
	}
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// registered is a recorder of what metrics.Register registers
// (metrics.Collectors).
var registered = func() *recorder {
	r := &recorder{Registry: prometheus.NewRegistry(), names: map[string]bool{}, histograms: map[string]bool{}, labels: map[string][]string{}}
	r.MustRegister(metrics.Collectors()...)
	return r
}()

// known reports whether a series name is one apportion exports: a
// registered metric, a histogram's _bucket, _sum or _count series, or an
// allowed one.
func known(name string) bool {
	if registered.names[name] || allowed[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && registered.histograms[base] {
			return true
		}
	}
	return false
}

// grafanaVars replaces Grafana's interval variables, which PromQL cannot
// parse in a range; variables inside label values parse as they are.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// metricNames parses a PromQL expression and returns the metric names it
// selects; a selector without a name is an error.
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	var names []string
	var errs []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				errs = append(errs, vs.String())
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("%q: selectors without a metric name: %v", expr, errs)
	}
	return names, nil
}

// checkExprs fails the test for every expression that does not parse or
// uses a metric apportion does not export; it returns the metric names
// used.
func checkExprs(t *testing.T, where string, exprs []string) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	for _, expr := range exprs {
		names, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		for _, n := range names {
			used[n] = true
			if !known(n) {
				t.Errorf("%s: %q uses %s, which apportion does not export", where, expr, n)
			}
		}
	}
	return used
}

func TestRecorderSeesApportionMetrics(t *testing.T) {
	for _, n := range []string{"apportion_admission_pods_total", "apportion_placement_gate_wait_seconds", "apportion_capacity_unavailable"} {
		if !registered.names[n] {
			t.Errorf("metrics.Register did not register %s: %v", n, registered.names)
		}
	}
	if !known("apportion_admission_duration_seconds_bucket") {
		t.Error("a histogram's _bucket series is not accepted")
	}
	for _, n := range []string{"apportion_admission_pods_total_count", "apportion_nope_total", "controller_runtime_reconcile_total"} {
		if known(n) {
			t.Errorf("%s is accepted, but apportion does not export it", n)
		}
	}
	if _, err := metricNames(`rate({__name__=~"apportion_.+"}[5m])`); err == nil {
		t.Error("a selector without a metric name is accepted")
	}
}

// dashboardExprs returns every query of the dashboard: the panels' targets
// and the query variables' label_values metric selectors.
func dashboardExprs(t *testing.T, raw []byte) []string {
	t.Helper()
	var d any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\)$`)
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if s, ok := c.(string); ok && (k == "expr" || (k == "query" && strings.HasPrefix(s, "label_values("))) {
					if k == "query" {
						m := labelValues.FindStringSubmatch(s)
						if m == nil {
							t.Errorf("variable query %q: not label_values(selector, label)", s)
							continue
						}
						s = m[1]
					}
					exprs = append(exprs, s)
				}
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(d)
	return exprs
}

func TestDashboardUsesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	exprs := dashboardExprs(t, raw)
	if len(exprs) < 20 {
		t.Fatalf("found %d queries in the dashboard, want its panels' and variables' (at least 20)", len(exprs))
	}
	used := checkExprs(t, "dashboard", exprs)
	// The dashboard covers every metric apportion registers.
	var missing []string
	for n := range registered.names {
		if !used[n] && !used[n+"_bucket"] && !used[n+"_sum"] && !used[n+"_count"] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("no dashboard panel shows %v", missing)
	}
}

func TestDashboardConfigMap(t *testing.T) {
	if objs := render(t); objs["ConfigMap/apportion-dashboard"] != nil || objs["PrometheusRule/apportion"] != nil {
		t.Fatal("the dashboard or the rule renders although both are off by default")
	}
	objs := render(t, "grafanaDashboard.enabled=true", "grafanaDashboard.namespace=monitoring")
	cm := objs["ConfigMap/apportion-dashboard"]
	if cm == nil {
		t.Fatalf("no ConfigMap apportion-dashboard in %v", keys(objs))
	}
	if cm.GetNamespace() != "monitoring" || cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap namespace %q labels %v, want monitoring and grafana_dashboard=1", cm.GetNamespace(), cm.GetLabels())
	}
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "apportion.json")
	if strings.TrimSpace(data) != strings.TrimSpace(string(raw)) {
		t.Error("the ConfigMap's apportion.json differs from " + dashboardFile)
	}
}

// runbookDoc is the page with a section "Alert: NAME" for each alert, the
// anchor its runbook_url ends with.
const runbookDoc = "docs/troubleshooting.md"

func TestPrometheusRule(t *testing.T) {
	objs := render(t, "prometheusRule.enabled=true", "prometheusRule.runbookURL=https://example.com/README.md")
	rule := objs["PrometheusRule/apportion"]
	if rule == nil {
		t.Fatalf("no PrometheusRule apportion in %v", keys(objs))
	}
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	content, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rule groups: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	runbooks, err := os.ReadFile(filepath.Join("..", "..", runbookDoc))
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	var exprs []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			exprs = append(exprs, r.Expr)
			want := "https://example.com/README.md#alert-" + strings.ToLower(r.Alert)
			if got := r.Annotations["runbook_url"]; got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
			if !regexp.MustCompile(`(?m)^#{1,6} Alert: ` + regexp.QuoteMeta(r.Alert) + `$`).Match(runbooks) {
				t.Errorf("%s: %s has no section \"## Alert: %s\" for its runbook_url", r.Alert, runbookDoc, r.Alert)
			}
		}
	}
	for _, a := range []string{"ApportionCapacityUnavailable", "ApportionPodsReleasedByJanitor", "ApportionAdmissionFailingOpen",
		"ApportionImageInspectionFailing", "ApportionCertificateExpiring", "ApportionNoLeader", "ApportionWorkloadDrift"} {
		if !alerts[a] {
			t.Errorf("alert %s is missing (have %v)", a, alerts)
		}
	}
	checkExprs(t, "PrometheusRule", exprs)
}

// The labels a Prometheus selects rules by are the PrometheusRule's own: the
// rule groups stay as they are.
func TestPrometheusRuleAdditionalLabels(t *testing.T) {
	objs := render(t, "prometheusRule.enabled=true", "prometheusRule.additionalLabels.release=prom")
	rule := objs["PrometheusRule/apportion"]
	if rule == nil {
		t.Fatalf("no PrometheusRule apportion in %v", keys(objs))
	}
	labels := rule.GetLabels()
	if labels["release"] != "prom" || labels["app.kubernetes.io/name"] == "" {
		t.Errorf("labels %v, want release=prom beside the chart's own", labels)
	}
	if got, want := ruleAlerts(t, rule), ruleAlerts(t, render(t, "prometheusRule.enabled=true")["PrometheusRule/apportion"]); !slices.Equal(got, want) {
		t.Errorf("with additionalLabels the alerts are %v, want %v", got, want)
	}
}

// ruleAlerts returns the alert names of a rendered PrometheusRule, in order.
func ruleAlerts(t *testing.T, rule *unstructured.Unstructured) []string {
	t.Helper()
	if rule == nil {
		t.Fatal("no PrometheusRule")
	}
	var names []string
	for _, g := range ruleGroups(t, rule).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	return names
}

// ruleGroups parses a rendered PrometheusRule's spec as a Prometheus rule
// file.
func ruleGroups(t *testing.T, rule *unstructured.Unstructured) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.Parse(ruleFile(t, rule), false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rule groups: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	return groups
}

// ruleFile returns a rendered PrometheusRule's spec, its groups, as a
// Prometheus rule file.
func ruleFile(t *testing.T, rule *unstructured.Unstructured) []byte {
	t.Helper()
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	content, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return content
}

func keys(objs map[string]*unstructured.Unstructured) []string {
	var ks []string
	for k := range objs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// render runs helm template on chart/ with the given --set values and
// returns the objects, keyed by "Kind/name".
func render(t *testing.T, set ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	helm, err := helmbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	// The chart refuses to render without an image repository.
	args := []string{"template", "apportion", chartDir, "-n", "apportion-system", "--kube-version", "1.36.0",
		"--set", "controller.image.repository=registry.example.com/apportion"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helm, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	objs := map[string]*unstructured.Unstructured{}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(&stdout))
	for {
		doc, err := docs.Read()
		if err != nil {
			break
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		objs[u.GetKind()+"/"+u.GetName()] = u
	}
	return objs
}
