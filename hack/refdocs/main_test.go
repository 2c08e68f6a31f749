package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

const root = "../.."

// tableRows returns the cells of the rows of the Markdown tables in page
// whose first cell is inline code, by that code.
func tableRows(page string) map[string][]string {
	rows := map[string][]string{}
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[strings.Trim(cells[0], "`")] = cells
	}
	return rows
}

// Every metric apportion registers has a row in the committed page with its
// type and labels: a metric added without `make generate` fails here.
func TestMetricsPageListsEveryRegisteredMetric(t *testing.T) {
	ms, err := registeredMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 20 {
		t.Fatalf("found %d registered metrics, want apportion's (at least 20)", len(ms))
	}
	committed, err := os.ReadFile(filepath.Join(root, outDir, "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, page := range map[string]string{"generated": metricsPage(ms), "committed": string(committed)} {
		rows := tableRows(page)
		if len(rows) != len(ms) {
			t.Errorf("%s page: %d rows, want one per registered metric (%d)", name, len(rows), len(ms))
		}
		for _, m := range ms {
			r, ok := rows[m.Name]
			if !ok {
				t.Errorf("%s page: no row for %s (run make generate)", name, m.Name)
				continue
			}
			if len(r) != 5 || r[1] != m.Type || r[2] != strings.Join(codes(m.Labels), ", ") || r[4] == "" {
				t.Errorf("%s page: row %v, want type %s, labels %v and a meaning", name, r, m.Type, m.Labels)
			}
		}
	}
}

func codes(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = code(s)
	}
	return out
}

// The metrics read back are the ones pkg/metrics declares, with their
// kinds, labels and units.
func TestRegisteredMetrics(t *testing.T) {
	ms, err := registeredMetrics()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]metric{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	for _, c := range []struct {
		collector    prometheus.Collector
		name, typ    string
		labels       []string
		unit, inHelp string
	}{
		{metrics.AdmissionTotal, "apportion_admission_pods_total", "counter", []string{"result"}, "count since start", "Pod admissions"},
		{metrics.AdmissionSeconds, "apportion_admission_duration_seconds", "histogram", nil, "seconds", "admission"},
		{metrics.ImageCacheEntries, "apportion_image_cache_entries", "gauge", nil, "—", "cache"},
		{metrics.WorkloadPods, "apportion_workload_pods", "gauge", []string{"workload_namespace", "kind", "name", "group", "state"}, "—", "desired"},
		{metrics.CertificateExpiryTimestampSeconds, "apportion_certificate_expiry_timestamp_seconds", "gauge", []string{"kind"}, "seconds since the Unix epoch", "Expiry"},
		{metrics.DeletionCostPatchesTotal, "apportion_deletioncost_patches_total", "counter", nil, "count since start", "deletion cost"},
	} {
		m, ok := byName[c.name]
		if !ok {
			t.Errorf("%s not found among %d metrics", c.name, len(ms))
			continue
		}
		if m.Type != c.typ || !reflect.DeepEqual(m.Labels, c.labels) || unit(m.Name) != c.unit || !strings.Contains(m.Help, c.inHelp) {
			t.Errorf("%s: %+v (unit %q), want type %s, labels %v, unit %q, help with %q", c.name, m, unit(m.Name), c.typ, c.labels, c.unit, c.inHelp)
		}
		got, err := describe(c.collector)
		if err != nil || len(got) != 1 || got[0].Name != c.name {
			t.Errorf("describe(%s) = %+v, %v", c.name, got, err)
		}
	}
}

func TestParseDesc(t *testing.T) {
	d := prometheus.NewDesc("a_b_seconds", `help with "quotes", {braces} and | a pipe`, []string{"x", "y"}, prometheus.Labels{"fixed": "v"})
	m, err := parseDesc(d.String())
	if err != nil {
		t.Fatal(err)
	}
	want := metric{Name: "a_b_seconds", Help: `help with "quotes", {braces} and | a pipe`, Labels: []string{`fixed="v"`, "x", "y"}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("parseDesc(%s) = %+v, want %+v", d, m, want)
	}
	if _, err := parseDesc("Desc{something else}"); err == nil {
		t.Error("a description in another form is read without an error")
	}
	if got := meaning(metric{Help: "Things by kind. Labels: kind.", Labels: []string{"kind"}}); got != "Things by kind." {
		t.Errorf("meaning = %q: the sentence naming the labels stays", got)
	}
	if got := meaning(metric{Help: "Look-ups. Labels: result (hit, miss).", Labels: []string{"result"}}); got != "Look-ups. Labels: result (hit, miss)." {
		t.Errorf("meaning = %q: the labels' values are gone", got)
	}
	if got := cell(m.Help); strings.Contains(strings.ReplaceAll(got, `\|`, ""), "|") {
		t.Errorf("cell(%q) = %q: a bare pipe splits the table's cell", m.Help, got)
	}
}

// jsonPaths returns the JSON paths of the fields of a Go type, as the CRD
// tables write them; fields of Kubernetes's types are not followed.
func jsonPaths(prefix string, typ reflect.Type) []string {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + "." + name
		out = append(out, path)
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice {
			ft, path = ft.Elem(), path+"[]"
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == reflect.TypeFor[v1alpha1.Target]().PkgPath() {
			out = append(out, jsonPaths(path, ft)...)
		}
	}
	return out
}

// kindRows returns the table rows of one kind's section of the CRD page.
func kindRows(page, kind string) map[string][]string {
	for _, s := range strings.Split(page, "\n## ")[1:] {
		if k, body, _ := strings.Cut(s, "\n"); k == kind {
			return tableRows(body)
		}
	}
	return nil
}

// Every field of the Go types has a row in the committed page, in the
// table of its kind: a field added without `make generate` fails here.
func TestCRDPageListsEveryField(t *testing.T) {
	committed, err := os.ReadFile(filepath.Join(root, outDir, "crds.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []any{v1alpha1.PlacementPolicy{}, v1alpha1.ClusterPlacementPolicy{}} {
		typ := reflect.TypeOf(obj)
		rows := kindRows(string(committed), typ.Name())
		var paths []string
		for _, top := range []string{"Spec", "Status"} {
			f, _ := typ.FieldByName(top)
			paths = append(paths, strings.ToLower(top))
			paths = append(paths, jsonPaths(strings.ToLower(top), f.Type)...)
		}
		if len(paths) < 15 {
			t.Fatalf("%s: %d fields from the Go type, want more: %v", typ.Name(), len(paths), paths)
		}
		for _, p := range paths {
			if _, ok := rows[p]; !ok {
				t.Errorf("%s: no row for %s in crds.md (run make generate)", typ.Name(), p)
			}
		}
		if len(rows) != len(paths) {
			t.Errorf("%s: %d rows in crds.md, want one per field of the Go type (%d)", typ.Name(), len(rows), len(paths))
		}
	}
}

func TestCRDPageDetails(t *testing.T) {
	page, err := render(root)
	if err != nil {
		t.Fatal(err)
	}
	for where, want := range map[string]*regexp.Regexp{
		"PlacementPolicy spec.target":                   regexp.MustCompile(`^object \| yes \|  \| .*Validation: exactly one of name and selector must be set\.`),
		"PlacementPolicy spec.target.kind":              regexp.MustCompile("^string \\|  \\|  \\| .*One of `Deployment`, `StatefulSet`"),
		"ClusterPlacementPolicy spec.priority":          regexp.MustCompile("^int32 \\|  \\| `0` \\| Priority ranks"),
		"ClusterPlacementPolicy spec.allowSkip":         regexp.MustCompile("^boolean \\|  \\| `true` \\| "),
		"PlacementPolicy spec.strategy.groups[].max":    regexp.MustCompile(`^int32 \|  \|  \| .*Minimum 1\.`),
		"ClusterPlacementPolicy spec.namespaceSelector": regexp.MustCompile(`^\[LabelSelector\]\(https://[^)]+\) \| yes \| `),
		"PlacementPolicy status.conditions":             regexp.MustCompile(`^\[\[\]Condition\]\(https://[^)]+\) \|  \| `),
		"ClusterPlacementPolicy spec.target.kinds":      regexp.MustCompile("Each item: one of `Deployment`"),
	} {
		kind, path, _ := strings.Cut(where, " ")
		r, ok := kindRows(page["crds.md"], kind)[path]
		if !ok {
			t.Errorf("%s: no row for %s", kind, path)
			continue
		}
		if line := strings.Join(r[1:], " | "); !want.MatchString(line) {
			t.Errorf("%s %s: %q does not match %s", kind, path, line, want)
		}
	}
	// A label selector's own fields are Kubernetes's, not listed.
	if _, ok := kindRows(page["crds.md"], "PlacementPolicy")["spec.target.selector.matchLabels"]; ok {
		t.Error("the fields of a label selector are listed")
	}
}

func TestDashboardPage(t *testing.T) {
	ms, err := registeredMetrics()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	page, err := dashboardPage(raw, ms)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Admission (pods webhook)\n\nWhat the pods webhook answered",
		"| Admission latency | apportion_admission_duration_seconds, server side. | `apportion_admission_duration_seconds` |",
		"| Fail-open admissions | ",
		"`apportion_admission_pods_total`, `controller_runtime_webhook_requests_total`, `apportion_admission_decision_annotations_removed_total` |",
		"| Namespace | `$namespace` | `label_values(apportion_admission_pods_total, namespace)` |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the dashboard page lacks %q", want)
		}
	}
	// Every registered metric shows on some panel.
	for _, m := range ms {
		if !strings.Contains(page, "| "+code(m.Name)) && !strings.Contains(page, ", "+code(m.Name)) {
			t.Errorf("no panel of the dashboard page names %s", m.Name)
		}
	}

	bare := `{"title": "t", "panels": [
		{"type": "row", "title": "R"},
		{"type": "timeseries", "title": "P", "targets": [{"expr": "rate(x_total[5m])"}]},
		{"type": "timeseries", "title": "Q", "description": "d", "targets": [{"expr": "sum(rate(y{a=\"b\"}[1m]))"}]}]}`
	_, err = dashboardPage([]byte(bare), nil)
	if err == nil || !strings.Contains(err.Error(), `row "R" has no description`) || !strings.Contains(err.Error(), `panel "P" has no description`) || strings.Contains(err.Error(), `"Q"`) {
		t.Errorf("a row and a panel without descriptions: error %v, want both named and only them", err)
	}
}

func TestRowsAndPanelMetrics(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal([]byte(`{"panels": [
		{"type": "stat", "title": "before any row"},
		{"type": "row", "title": "A"},
		{"type": "timeseries", "title": "a1", "targets": [{"expr": "histogram_quantile(0.9, sum by (le) (rate(h_seconds_bucket{x=~\"$v\"}[$__rate_interval]))) / sum(rate(h_seconds_count [5m])) + up{job=\"j\"}"}]},
		{"type": "row", "title": "B", "collapsed": true, "panels": [{"type": "table", "title": "b1"}]}]}`), &d); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows(d.Panels) {
		var titles []string
		for _, p := range r.children {
			titles = append(titles, p.Title)
		}
		got = append(got, r.Title+":"+strings.Join(titles, ","))
	}
	if want := []string{"Top:before any row", "A:a1", "B:b1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rows = %v, want %v", got, want)
	}
	a1 := rows(d.Panels)[1].children[0]
	if got, want := panelMetrics(a1, map[string]bool{"h_seconds": true}), []string{"h_seconds", "up"}; !reflect.DeepEqual(got, want) {
		t.Errorf("panelMetrics = %v, want %v", got, want)
	}
}

// The pages written are the ones committed: `make generate` was run after
// the last change to the metrics, the API types or the dashboard.
func TestCommittedPagesAreCurrent(t *testing.T) {
	pages, err := render(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range pages {
		got, err := os.ReadFile(filepath.Join(root, outDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s/%s differs from what the code gives: run make generate", outDir, name)
		}
	}
}
