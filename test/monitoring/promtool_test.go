//go:build chart

package monitoring

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"sigs.k8s.io/yaml"
)

// alertTests is the promtool unit test file of the chart's alerts; promtool
// reads the rendered rules from rules.yaml beside it.
var alertTests = filepath.Join("testdata", "alerts_test.yaml")

// targetLabels are the labels the Prometheus Operator gives every series it
// scrapes through a ServiceMonitor; the input series of alertTests carry
// them beside the metric's own.
var targetLabels = []string{"namespace", "service", "pod", "container", "endpoint", "job", "instance"}

// ownLabels are the labels of the series apportion does not register
// itself (see allowed).
var ownLabels = map[string][]string{
	"leader_election_master_status":             {"name"},
	"controller_runtime_webhook_requests_total": {"code", "webhook"},
	"up": nil,
}

// promtool is $PROMTOOL when set, else the one test/tools/build.sh built
// (make test-chart sets PROMTOOL, building it first when needed).
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	out, err := exec.Command("bash", filepath.Join("..", "tools", "build.sh"), "--print-dir").Output()
	if err != nil {
		t.Fatalf("test/tools/build.sh --print-dir: %v", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "promtool")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no promtool: run test/tools/build.sh (make tools) or set PROMTOOL (%v)", err)
	}
	return p
}

// TestAlertRulesPromtool runs promtool's unit tests of the alerts on the
// PrometheusRule as helm renders it: each alert fires on series shaped like
// apportion's and resolves when they recover.
func TestAlertRulesPromtool(t *testing.T) {
	rule := render(t, "prometheusRule.enabled=true", "prometheusRule.runbookURL=https://example.com/runbook")["PrometheusRule/apportion"]
	if rule == nil {
		t.Fatal("no PrometheusRule apportion")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleFile(t, rule), 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool(t), "test", "rules", "alerts_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", alertTests, err, out)
	}
	t.Logf("promtool test rules:\n%s", out)
}

// The parts of a promtool unit test file the checks below read.
type unitTests struct {
	Tests []struct {
		Name        string `json:"name"`
		InputSeries []struct {
			Series string `json:"series"`
		} `json:"input_series"`
		AlertRuleTests []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func readUnitTests(t *testing.T) *unitTests {
	t.Helper()
	raw, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	var u unitTests
	if err := yaml.Unmarshal(raw, &u); err != nil {
		t.Fatalf("%s: %v", alertTests, err)
	}
	return &u
}

// firesAndResolves lists, per alert name, the test groups in which it is
// expected firing at one eval_time and gone at a later one.
func firesAndResolves(t *testing.T, u *unitTests) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for _, g := range u.Tests {
		firing := map[string]model.Duration{}
		resolved := map[string][]model.Duration{}
		for _, a := range g.AlertRuleTests {
			at, err := model.ParseDuration(a.EvalTime)
			if err != nil {
				t.Errorf("%s: eval_time %q: %v", g.Name, a.EvalTime, err)
				continue
			}
			if len(a.ExpAlerts) > 0 {
				if first, ok := firing[a.Alertname]; !ok || at < first {
					firing[a.Alertname] = at
				}
			} else {
				resolved[a.Alertname] = append(resolved[a.Alertname], at)
			}
		}
		for name, first := range firing {
			if slices.ContainsFunc(resolved[name], func(at model.Duration) bool { return at > first }) {
				got[name] = append(got[name], g.Name)
			}
		}
	}
	return got
}

// TestEveryAlertHasACase fails for an alert of the chart's rule that
// alertTests never shows firing and then resolved.
func TestEveryAlertHasACase(t *testing.T) {
	alerts := ruleAlerts(t, render(t, "prometheusRule.enabled=true")["PrometheusRule/apportion"])
	if len(alerts) == 0 {
		t.Fatal("the rule has no alerts")
	}
	cases := firesAndResolves(t, readUnitTests(t))
	for _, a := range alerts {
		if len(cases[a]) == 0 {
			t.Errorf("alert %s has no case in %s where it fires and, at a later eval_time, has resolved", a, alertTests)
		}
	}
}

func TestFiresAndResolves(t *testing.T) {
	parse := func(s string) *unitTests {
		var u unitTests
		if err := yaml.Unmarshal([]byte(s), &u); err != nil {
			t.Fatal(err)
		}
		return &u
	}
	for _, tc := range []struct {
		name, tests string
		want        []string
	}{
		{"fires then resolves", `tests: [{name: g, alert_rule_test: [
			{eval_time: 5m, alertname: A, exp_alerts: []},
			{eval_time: 10m, alertname: A, exp_alerts: [{exp_labels: {x: y}}]},
			{eval_time: 20m, alertname: A, exp_alerts: []}]}]`, []string{"A"}},
		{"resolved only before it fires", `tests: [{name: g, alert_rule_test: [
			{eval_time: 5m, alertname: A, exp_alerts: []},
			{eval_time: 10m, alertname: A, exp_alerts: [{exp_labels: {x: y}}]}]}]`, nil},
		{"never fires", `tests: [{name: g, alert_rule_test: [
			{eval_time: 5m, alertname: A, exp_alerts: []},
			{eval_time: 10m, alertname: A, exp_alerts: []}]}]`, nil},
		{"resolved in another group", `tests: [
			{name: g, alert_rule_test: [{eval_time: 10m, alertname: A, exp_alerts: [{exp_labels: {x: y}}]}]},
			{name: h, alert_rule_test: [{eval_time: 20m, alertname: A, exp_alerts: []}]}]`, nil},
		{"another alert resolves", `tests: [{name: g, alert_rule_test: [
			{eval_time: 10m, alertname: A, exp_alerts: [{exp_labels: {x: y}}]},
			{eval_time: 20m, alertname: B, exp_alerts: []}]}]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for name := range firesAndResolves(t, parse(tc.tests)) {
				got = append(got, name)
			}
			sort.Strings(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAlertTestSeriesShapedLikeApportions fails for an input series of
// alertTests that apportion does not export, or whose labels are not the
// metric's own plus the target labels.
func TestAlertTestSeriesShapedLikeApportions(t *testing.T) {
	n := 0
	for _, g := range readUnitTests(t).Tests {
		for _, s := range g.InputSeries {
			n++
			if err := seriesShape(s.Series); err != nil {
				t.Errorf("%s: %v", g.Name, err)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no input series in %s", alertTests)
	}
	for _, bad := range []string{
		`apportion_admission_pods_total{namespace="a", service="s", pod="p", container="c", endpoint="e", job="j", instance="i"}`,
		`apportion_admission_pods_total{namespace="a", service="s", pod="p", container="c", endpoint="e", job="j", instance="i", result="gated", nodepool="x"}`,
		`apportion_admission_pods_total{result="gated"}`,
		`apportion_admission_total{namespace="a", service="s", pod="p", container="c", endpoint="e", job="j", instance="i", result="gated"}`,
	} {
		if seriesShape(bad) == nil {
			t.Errorf("series %s is accepted", bad)
		}
	}
}

// seriesShape checks one input series: a name apportion exports, its own
// labels and the target labels, no other.
func seriesShape(series string) error {
	lbls, err := promql.ParseMetric(series)
	if err != nil {
		return fmt.Errorf("%s: %w", series, err)
	}
	name := lbls.Get(model.MetricNameLabel)
	if !known(name) {
		return fmt.Errorf("%s: apportion does not export %s", series, name)
	}
	want := slices.Concat(targetLabels, labelsOf(name))
	var have []string
	lbls.Range(func(l labels.Label) {
		if l.Name != model.MetricNameLabel {
			have = append(have, l.Name)
		}
	})
	sort.Strings(want)
	sort.Strings(have)
	if !slices.Equal(have, want) {
		return fmt.Errorf("%s: labels %v, want %v", series, have, want)
	}
	return nil
}

// labelsOf returns the label names a series of apportion's has, without the
// target labels.
func labelsOf(name string) []string {
	if l, ok := ownLabels[name]; ok {
		return l
	}
	if l, ok := registered.labels[name]; ok {
		return l
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && registered.histograms[base] {
			l := registered.labels[base]
			if suffix == "_bucket" {
				l = append(slices.Clone(l), "le")
			}
			return l
		}
	}
	return nil
}

// descLabels returns the variable label names of a metric description.
func descLabels(desc string) []string {
	m := variableLabels.FindStringSubmatch(desc)
	if m == nil || m[1] == "" {
		return nil
	}
	return strings.Split(m[1], ",")
}
