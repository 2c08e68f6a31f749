package main

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apportion-dev/apportion/pkg/metrics"
)

// metric is one metric as apportion serves it.
type metric struct {
	Name   string
	Type   string // counter, gauge, histogram, summary
	Help   string
	Labels []string
}

// registeredMetrics returns the metrics metrics.Register adds
// (metrics.Collectors), sorted by name; the answer is kept.
var registeredMetrics = sync.OnceValues(func() ([]metric, error) {
	collectors := metrics.Collectors()
	if len(collectors) == 0 {
		return nil, fmt.Errorf("metrics.Collectors is empty")
	}
	var ms []metric
	for _, c := range collectors {
		got, err := describe(c)
		if err != nil {
			return nil, err
		}
		ms = append(ms, got...)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return ms, nil
})

// descString parses what prometheus.Desc's String prints, the one way the
// client library gives a Desc's name, help and labels.
var descString = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// describe returns the metrics of one collector.
func describe(c prometheus.Collector) ([]metric, error) {
	typ, err := metricType(c)
	if err != nil {
		return nil, err
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var ms []metric
	var bad error
	for d := range ch {
		m, err := parseDesc(d.String())
		if err != nil {
			bad = err
			continue
		}
		m.Type = typ
		ms = append(ms, m)
	}
	return ms, bad
}

func parseDesc(s string) (metric, error) {
	sub := descString.FindStringSubmatch(s)
	if sub == nil {
		return metric{}, fmt.Errorf("cannot read the metric description %s", s)
	}
	name, err := strconv.Unquote(sub[1])
	if err != nil {
		return metric{}, fmt.Errorf("%s: %w", s, err)
	}
	help, err := strconv.Unquote(sub[2])
	if err != nil {
		return metric{}, fmt.Errorf("%s: %w", s, err)
	}
	m := metric{Name: name, Help: help}
	if sub[3] != "" {
		// Fixed labels, as name="value".
		m.Labels = append(m.Labels, strings.Split(sub[3], ",")...)
	}
	for _, l := range strings.Split(sub[4], ",") {
		// A label with a constraint prints as c(name).
		if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
			m.Labels = append(m.Labels, l)
		}
	}
	return m, nil
}

// metricType is the Prometheus type of a collector: a vector's from its
// kind, a single metric's from what a registry gathers of it.
func metricType(c prometheus.Collector) (string, error) {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter", nil
	case *prometheus.GaugeVec:
		return "gauge", nil
	case *prometheus.HistogramVec:
		return "histogram", nil
	case *prometheus.SummaryVec:
		return "summary", nil
	}
	// A single metric is always gathered, with its type.
	if _, ok := c.(prometheus.Metric); !ok {
		return "", fmt.Errorf("collector %T: neither a metric vector nor a single metric", c)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return "", err
	}
	families, err := reg.Gather()
	if err != nil {
		return "", err
	}
	if len(families) != 1 {
		return "", fmt.Errorf("collector %T: %d metric families, want 1", c, len(families))
	}
	switch t := strings.ToLower(families[0].GetType().String()); t {
	case "counter", "gauge", "histogram", "summary":
		return t, nil
	default:
		return "", fmt.Errorf("%s: metric type %s", families[0].GetName(), t)
	}
}

// unit reads a metric's unit from its name's suffix, as Prometheus's naming
// conventions put it there.
func unit(name string) string {
	switch {
	case strings.HasSuffix(name, "_timestamp_seconds"):
		return "seconds since the Unix epoch"
	case strings.HasSuffix(name, "_seconds"):
		return "seconds"
	case strings.HasSuffix(name, "_bytes"):
		return "bytes"
	case strings.HasSuffix(name, "_total"):
		return "count since start"
	}
	return "—"
}

func metricsPage(ms []metric) string {
	var b strings.Builder
	b.WriteString(header("Metrics", "the collectors of pkg/metrics"))
	b.WriteString(`Every metric apportion registers, served by each replica on its metrics
endpoint (the chart's ` + "`controller.metrics`" + ` values; ` + "`serviceMonitor.enabled`" + ` for the
Prometheus Operator). The manager also serves controller-runtime's metrics
(` + "`controller_runtime_*`" + `, ` + "`workqueue_*`" + `, ` + "`leader_election_master_status`" + `) and the Go
runtime's and the process's (` + "`go_*`" + `, ` + "`process_*`" + `), which are not listed here.

A counter counts since its replica started: use ` + "`rate()`" + ` or ` + "`increase()`" + `. A
histogram is served as ` + "`NAME_bucket`" + `, ` + "`NAME_sum`" + ` and ` + "`NAME_count`" + `. A unit of — is a
plain number: things counted now, or 0 and 1. Prometheus adds the labels of the
scraped target (` + "`namespace`" + `, ` + "`pod`" + `, ...) to every series; apportion's own label for
a workload's namespace is therefore ` + "`workload_namespace`" + `.
The values each label takes, and what apportion does on each failure:
[Metrics](../operations.md#metrics) and [When something fails](../operations.md).
The [dashboard](dashboard.md) shows them all.

| Name | Type | Labels | Unit | Meaning |
|---|---|---|---|---|
`)
	for _, m := range ms {
		labels := make([]string, len(m.Labels))
		for i, l := range m.Labels {
			labels[i] = code(l)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", code(m.Name), m.Type, strings.Join(labels, ", "), unit(m.Name), cell(meaning(m)))
	}
	return b.String()
}

// meaning is a metric's help without a last sentence that only names its
// labels, which the table's Labels column shows.
func meaning(m metric) string {
	if len(m.Labels) > 0 {
		if rest, ok := strings.CutSuffix(m.Help, " Labels: "+strings.Join(m.Labels, ", ")+"."); ok {
			return rest
		}
	}
	return m.Help
}
