package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/test/promtext"
)

func TestCost(t *testing.T) {
	before := snapshot{
		"a": promtext.Parse(`rest_client_requests_total{method="PATCH"} 10
rest_client_requests_total{method="GET"} 5
process_cpu_seconds_total 1
go_memstats_heap_inuse_bytes 1000
apportion_placement_decisions_total{group="g",nodepool="p",result="placed"} 0
`),
		"b": promtext.Parse(`rest_client_requests_total{method="PUT"} 4
process_cpu_seconds_total 2
go_memstats_heap_inuse_bytes 2000
`),
	}
	after := snapshot{
		"a": promtext.Parse(`rest_client_requests_total{method="PATCH"} 210
rest_client_requests_total{method="GET"} 5
rest_client_requests_total{method="POST"} 10
process_cpu_seconds_total 11
process_resident_memory_bytes 5e7
go_memstats_heap_inuse_bytes 101000
apportion_placement_decisions_total{group="g",nodepool="p",result="placed"} 100
apportion_placement_released_total{reason="timeout"} 3
apportion_placement_gate_wait_seconds_bucket{le="0.01"} 50
apportion_placement_gate_wait_seconds_bucket{le="0.02"} 100
apportion_placement_gate_wait_seconds_bucket{le="+Inf"} 100
`),
		"b": promtext.Parse(`rest_client_requests_total{method="PUT"} 14
process_cpu_seconds_total 3
go_memstats_heap_inuse_bytes 52000
`),
	}
	c := cost(before, after, "a", 100, 100)
	if c.PerPod["PATCH"] != 2 || c.PerPod["POST"] != 0.1 || c.PerPod["PUT"] != 0.1 || c.PerPod["GET"] != 0 {
		t.Errorf("requests per placed pod = %v, want PATCH 2, POST 0.1, PUT 0.1 and no GET", c.PerPod)
	}
	if math.Abs(c.WritesPerPod-2.2) > 1e-9 {
		t.Errorf("writes per placed pod = %g, want 2.2", c.WritesPerPod)
	}
	if math.Abs(c.CPUPerPod-0.11) > 1e-9 {
		t.Errorf("CPU per placed pod = %g, want 0.11 (11 s over 100 pods)", c.CPUPerPod)
	}
	if c.Decisions["placed"] != 100 || c.Released["timeout"] != 3 {
		t.Errorf("decisions %v released %v", c.Decisions, c.Released)
	}
	if got := c.GateWait.Quantile(0.99); got != 0.02 {
		t.Errorf("gate wait p99 <= %g, want 0.02", got)
	}
	if len(c.Replicas) != 2 || !c.Replicas[0].Leader || c.Replicas[0].HeapPerPod != 1000 || c.Replicas[1].HeapPerPod != 500 {
		t.Errorf("replicas = %+v, want a leading with 1000 B per cached pod, b with 500", c.Replicas)
	}

	var out bytes.Buffer
	res := &result{Workloads: 1, Replicas: 100, Pods: 100, ApportionReplicas: 2,
		Without: &burstResult{Pods: 100, Reached: "Running", ToRunning: 10, ToScheduled: 8},
		With:    &burstResult{Apportion: true, Pods: 100, Reached: "Running", ToRunning: 15, ToScheduled: 12}, Cost: &c}
	if err := report(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.50", "2.20", "110.00ms", "PATCH 2.00", "a (leader)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
