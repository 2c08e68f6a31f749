package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// dashboard holds the parts of a Grafana dashboard's JSON model the page
// describes.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Label string `json:"label"`
			Type  string `json:"type"`
			// A query variable's query, in its definition.
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	// A collapsed row holds its panels.
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// row is a dashboard row and the panels under it.
type row struct {
	panel
	children []panel
}

// rows groups the panels under the row before them (a collapsed row holds
// its own).
func rows(panels []panel) []row {
	var out []row
	for _, p := range panels {
		switch {
		case p.Type == "row":
			out = append(out, row{panel: p, children: p.Panels})
		case len(out) == 0:
			out = append(out, row{panel: panel{Title: "Top"}})
			fallthrough
		default:
			out[len(out)-1].children = append(out[len(out)-1].children, p)
		}
	}
	return out
}

// selector matches the metric name of a PromQL selector: a name followed by
// its label matchers or its range.
var selector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{[]`)

// panelMetrics returns the metrics a panel queries, in order of first use: a
// histogram's series are named by the histogram.
func panelMetrics(p panel, histograms map[string]bool) []string {
	var names []string
	for _, t := range p.Targets {
		for _, m := range selector.FindAllStringSubmatch(t.Expr, -1) {
			n := m[1]
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(n, suffix); ok && histograms[base] {
					n = base
				}
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

func dashboardPage(raw []byte, ms []metric) (string, error) {
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return "", err
	}
	histograms := map[string]bool{}
	for _, m := range ms {
		if m.Type == "histogram" {
			histograms[m.Name] = true
		}
	}
	var errs []error
	var b strings.Builder
	b.WriteString(header("The Grafana dashboard", "chart/files/apportion-dashboard.json"))
	fmt.Fprintf(&b, `The chart ships a Grafana dashboard, %q (uid %s): set
%s and the chart creates a ConfigMap that the Grafana dashboard
sidecar loads (the ConfigMap's namespace and labels: [chart values](../../chart/README.md)).
Its panels query the [metrics](metrics.md) apportion serves, so Prometheus must scrape
apportion (%s with the Prometheus Operator).

`, d.Title, code(d.UID), code("grafanaDashboard.enabled: true"), code("serviceMonitor.enabled: true"))
	if len(d.Templating.List) > 0 {
		b.WriteString("Its variables, at the top:\n\n| Variable | Chooses | Values from |\n|---|---|---|\n")
		for _, v := range d.Templating.List {
			from := v.Definition
			if v.Type == "datasource" {
				from = "the Prometheus data sources of Grafana"
			} else if from != "" {
				from = code(from)
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", cell(v.Label), code("$"+v.Name), cell(from))
		}
		b.WriteString("\n")
	}
	for _, r := range rows(d.Panels) {
		fmt.Fprintf(&b, "## %s\n\n", cell(r.Title))
		if r.Description == "" {
			errs = append(errs, fmt.Errorf("row %q has no description", r.Title))
		}
		if r.Description != "" {
			fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(r.Description))
		}
		b.WriteString("| Panel | What it shows | Metrics |\n|---|---|---|\n")
		for _, p := range r.children {
			if p.Description == "" {
				errs = append(errs, fmt.Errorf("panel %q has no description", p.Title))
			}
			used := panelMetrics(p, histograms)
			if len(used) == 0 {
				errs = append(errs, fmt.Errorf("panel %q queries no metric", p.Title))
			}
			for i, n := range used {
				used[i] = code(n)
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", cell(p.Title), cell(p.Description), strings.Join(used, ", "))
		}
		b.WriteString("\n")
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return b.String(), nil
}
