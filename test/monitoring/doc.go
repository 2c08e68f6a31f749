// Package monitoring checks the chart's Grafana dashboard and PrometheusRule
// against the metrics apportion registers: every metric name a query or an
// alert expression uses must be one apportion or controller-runtime exports.
// It is a module of its own because github.com/prometheus/prometheus (the
// PromQL parser and the rule file format) would raise the main module's
// Kubernetes and Prometheus client versions.
package monitoring
