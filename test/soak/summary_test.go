package main

import (
	"bytes"
	"encoding/csv"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apportion-dev/apportion/test/promtext"
)

// run10 is ten good minutes: pods placed, every settled sample within
// quota, flat memory and goroutines.
func run10() []minute {
	rows := make([]minute, 10)
	for i := range rows {
		rows[i] = minute{Index: i + 1, Elapsed: float64(i + 1), Settled: 40, Within: 40, MaxRSSMiB: 60, MaxGoroutines: 300,
			admissions: admissions{Seen: 30, Decided: 30}}
	}
	return rows
}

func held(ts []target) map[string]bool {
	out := map[string]bool{}
	for _, t := range ts {
		out[t.Name] = t.Held
	}
	return out
}

func TestTargets(t *testing.T) {
	const warmUp = 2 * time.Minute
	if f := failed(targets(run10(), warmUp)); len(f) != 0 {
		t.Fatalf("a good run failed %v", f)
	}
	for _, tc := range []struct {
		name   string
		edit   func([]minute)
		failed string
	}{
		{"a pod undecided outside frozen moments", func(r []minute) { r[4].Undecided = 1 }, "pods without a decision outside frozen moments"},
		{"a settled sample off quota", func(r []minute) { r[4].Within = 39 }, "settled samples within quota"},
		{"no settled sample", func(r []minute) {
			for i := range r {
				r[i].Settled, r[i].Within = 0, 0
			}
		}, "settled samples within quota"},
		{"a pod that did not opt in gated", func(r []minute) { r[2].PlainGated = 1 }, "pods of workloads that did not opt in held by the gate"},
		{"a pod pending because of apportion", func(r []minute) { r[9].PendingApportion = 1 }, "pods Pending past their capacity timeout because of apportion"},
		{"RSS grows", func(r []minute) { r[9].MaxRSSMiB = 67 }, "RSS (largest replica) growth after warm-up"},
		{"goroutines grow", func(r []minute) { r[9].MaxGoroutines = 400 }, "goroutines (largest replica) growth after warm-up"},
		{"too short to tell", func(r []minute) {
			for i := range r {
				r[i].MaxRSSMiB = 0
			}
			r[9].MaxRSSMiB = 60
		}, "RSS (largest replica) growth after warm-up"},
	} {
		rows := run10()
		tc.edit(rows)
		f := failed(targets(rows, warmUp))
		if len(f) != 1 || f[0] != tc.failed {
			t.Errorf("%s: failed %v, want only %q", tc.name, f, tc.failed)
		}
	}

	// Growth during the warm-up, and an unread sample (0), do not count;
	// neither do undecided pods while a replica was frozen, which are
	// reported (advisory) against their own target.
	rows := run10()
	rows[0].MaxRSSMiB, rows[1].MaxGoroutines, rows[5].MaxRSSMiB = 20, 100, 0
	rows[3].Frozen, rows[3].SeenFrozen, rows[3].UndecidedFrozen = true, 10, 2
	ts := targets(rows, warmUp)
	if f := failed(ts); len(f) != 0 {
		t.Errorf("warm-up growth or frozen undecided pods failed %v", f)
	}
	if h := held(ts); h["pods without a decision while a replica was frozen"] {
		t.Error("2 of 10 pods undecided while frozen held the 1% target")
	}
	var out strings.Builder
	printTargets(&out, ts)
	if !strings.Contains(out.String(), "MISSED (advisory)") || !strings.Contains(out.String(), "2 of 10 (20.0%)") {
		t.Errorf("summary:\n%s", out.String())
	}
}

func TestCSV(t *testing.T) {
	rows := run10()[:2]
	rows[1].Replicas = []replicaStat{{Name: "apportion-abc-x1", Leader: true, RSSMiB: 61.25, HeapMiB: 20, Goroutines: 310}}
	var buf bytes.Buffer
	if err := writeCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want a header and 2 rows", len(recs))
	}
	for i, r := range recs {
		if len(r) != len(csvHeader) {
			t.Errorf("record %d has %d fields, the header %d", i, len(r), len(csvHeader))
		}
	}
	col := func(name string) int {
		for i, h := range csvHeader {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %s", name)
		return -1
	}
	if got := recs[2][col("within_quota_pct")]; got != "100.00" {
		t.Errorf("within_quota_pct = %s", got)
	}
	if got := recs[2][col("replicas")]; got != "apportion-abc-x1:true:61.2:20.0:310" {
		t.Errorf("replicas = %s", got)
	}
	if line := rows[1].line(); !strings.Contains(line, "x1* 61MiB/20MiB/310g") {
		t.Errorf("line: %s", line)
	}
}

func TestPodWrites(t *testing.T) {
	page := promtext.Parse(`# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 100
apiserver_request_total{code="201",component="apiserver",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 90
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 300
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 1000
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",subresource="",verb="DELETE",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",group="apps",resource="deployments",scope="resource",subresource="",verb="PATCH",version="v1"} 7
`)
	if got := podWrites(page); got != 500 {
		t.Errorf("pod writes = %g, want 500 (POST, binding, status PATCH, DELETE; no LIST, no Deployment)", got)
	}
}

func TestWritePlot(t *testing.T) {
	rows := run10()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for i := range rows {
		rows[i].At = t0.Add(time.Duration(i+1) * time.Minute)
		rows[i].Replicas = []replicaStat{{Name: "a", RSSMiB: 60, HeapMiB: 20, Goroutines: 300}, {Name: "b", RSSMiB: 55, HeapMiB: 18, Goroutines: 290}}
	}
	rows[4].Replicas[1].Frozen = true
	file := filepath.Join(t.TempDir(), "soak.png")
	if err := writePlot(file, rows, []window{{From: t0.Add(4 * time.Minute), To: t0.Add(5 * time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("soak.png is not a PNG: %v", err)
	}
	if cfg.Width < 600 || cfg.Height < 800 {
		t.Errorf("soak.png is %dx%d", cfg.Width, cfg.Height)
	}
}
