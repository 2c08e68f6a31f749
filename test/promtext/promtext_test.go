package promtext

import (
	"encoding/json"
	"math"
	"testing"
)

const page = `# HELP rest_client_requests_total Number of HTTP requests.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 12
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PATCH"} 30
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PATCH"} 2
apportion_placement_released_total{reason="a \"quoted\", comma"} 3
process_cpu_seconds_total 4.5
apportion_admission_duration_seconds_bucket{le="0.0001"} 5
apportion_admission_duration_seconds_bucket{le="0.001"} 9
apportion_admission_duration_seconds_bucket{le="+Inf"} 10
apportion_admission_duration_seconds_sum 0.01
not a Sample
`

func TestParseScrape(t *testing.T) {
	s := Parse(page)
	if got := s.Sum("rest_client_requests_total", nil); got != 44 {
		t.Errorf("sum of requests = %g, want 44", got)
	}
	if got := s.Sum("rest_client_requests_total", map[string]string{"method": "PATCH"}); got != 32 {
		t.Errorf("PATCH requests = %g, want 32", got)
	}
	if got := s.By("rest_client_requests_total", "method"); got["GET"] != 12 || got["PATCH"] != 32 || len(got) != 2 {
		t.Errorf("requests by method = %v", got)
	}
	if got := s.By("apportion_placement_released_total", "reason"); got[`a "quoted", comma`] != 3 {
		t.Errorf("escaped label value not read: %v", got)
	}
	if got := s.Sum("process_cpu_seconds_total", nil); got != 4.5 {
		t.Errorf("unlabelled Sample = %g, want 4.5", got)
	}
}

func TestHistogram(t *testing.T) {
	before := Parse(`h_bucket{le="0.001",pod="a"} 1
h_bucket{le="0.01",pod="a"} 1
h_bucket{le="+Inf",pod="a"} 1
`).Histogram("h")
	// Two label sets (two pods) of one Histogram are added up.
	after := Parse(`h_bucket{le="0.001",pod="a"} 3
h_bucket{le="0.01",pod="a"} 8
h_bucket{le="+Inf",pod="a"} 9
h_bucket{le="0.001",pod="b"} 2
h_bucket{le="0.01",pod="b"} 2
h_bucket{le="+Inf",pod="b"} 2
`).Histogram("h")
	d := after.Minus(before)
	if d.Total() != 10 {
		t.Fatalf("observations in between = %g, want 10 (%v)", d.Total(), d)
	}
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.1, 0.001}, {0.4, 0.001}, {0.5, 0.01}, {0.9, 0.01}, {1, math.Inf(1)}} {
		if got := d.Quantile(tc.q); got != tc.want {
			t.Errorf("quantile(%g) = %g, want %g (%v)", tc.q, got, tc.want, d)
		}
	}
	if got := (Histogram{}).Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("quantile of nothing = %g, want NaN", got)
	}
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"le":"0.001","count":4},{"le":"0.01","count":9},{"le":"+Inf","count":10}]`; string(data) != want {
		t.Errorf("JSON = %s, want %s", data, want)
	}
}
