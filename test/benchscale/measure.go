package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"time"

	"github.com/apportion-dev/apportion/test/promtext"
)

// Metric names read from the replicas: apportion's own and the ones
// controller-runtime exports for every manager (client-go's requests, the
// process and Go runtime collectors).
const (
	mDecisions = "apportion_placement_decisions_total"
	mReleased  = "apportion_placement_released_total"
	mGateWait  = "apportion_placement_gate_wait_seconds"
	mAdmission = "apportion_admission_duration_seconds"
	mAdmitted  = "apportion_admission_pods_total"
	mRequests  = "rest_client_requests_total"
	mCPU       = "process_cpu_seconds_total"
	mRSS       = "process_resident_memory_bytes"
	mHeap      = "go_memstats_heap_inuse_bytes"
)

// snapshot is every replica's /metrics page at one moment.
type snapshot map[string]promtext.Scrape

// take reads every replica's metrics; with gc it first has each replica
// collect its garbage (the heap profile's gc=1), so that heap in use is the
// live heap rather than whatever the collector had not reached yet.
func (b *bench) take(ctx context.Context, gc bool) (snapshot, error) {
	out := snapshot{}
	for _, r := range b.replicas {
		if gc {
			if err := b.get(ctx, r.pprofURL("heap?gc=1"), io.Discard); err != nil {
				return nil, fmt.Errorf("collecting the garbage of %s: %w", r.Name, err)
			}
		}
		text, err := r.Metrics()
		if err != nil {
			return nil, fmt.Errorf("reading the metrics of %s: %w", r.Name, err)
		}
		out[r.Name] = promtext.Parse(text)
	}
	return out, nil
}

func (r *replica) pprofURL(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/%s", r.pprofPort, path)
}

// get fetches url from inside the cluster's namespace into w.
func (b *bench) get(ctx context.Context, url string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	// The cluster's client gives up after a few seconds; a CPU profile
	// takes its length and more, bounded by ctx.
	hc := *b.c.HTTPClient()
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// settle waits until the replicas' API requests stop for two readings in a
// row, up to a minute: the deletion costs are written after the decisions
// and belong to the burst's cost.
func (b *bench) settle(ctx context.Context) {
	last := -1.0
	quiet := 0
	_ = waitUntil(ctx, time.Minute, func() (bool, error) {
		s, err := b.take(ctx, false)
		if err != nil {
			return false, err
		}
		var n float64
		for _, sc := range s {
			n += sc.Sum(mRequests, nil)
		}
		// The Lease renewals of the replicas go on: a few requests
		// every two seconds are quiet.
		if n-last <= float64(2*len(b.replicas)) {
			quiet++
		} else {
			quiet = 0
		}
		last = n
		if quiet < 2 {
			time.Sleep(1500 * time.Millisecond)
		}
		return quiet >= 2, nil
	})
}

// profileLeader writes a CPU profile of the placement leader, seconds long,
// to file.
func (b *bench) profileLeader(ctx context.Context, file string, length time.Duration) error {
	leader := b.leader()
	if leader == nil {
		return fmt.Errorf("profiling: no replica reports leading")
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("creating the profile file: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, length+time.Minute)
	defer cancel()
	url := leader.pprofURL(fmt.Sprintf("profile?seconds=%d", int(length.Seconds())))
	if err := b.get(ctx, url, f); err != nil {
		_ = f.Close()
		return fmt.Errorf("profiling %s: %w", leader.Name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the profile: %w", err)
	}
	say("wrote a %s CPU profile of %s to %s", length, leader.Name, file)
	return nil
}

// replicaCost is one replica's share of the burst with apportion.
type replicaCost struct {
	Name       string  `json:"name"`
	Leader     bool    `json:"leader"`
	CPUSeconds float64 `json:"cpuSeconds"`
	RSSBytes   float64 `json:"rssBytes"`
	HeapBytes  float64 `json:"heapInuseBytes"`
	// HeapPerPod is (heap after - heap before the pods) / pods cached.
	HeapPerPod float64 `json:"heapBytesPerCachedPod"`
}

// apportionCost is what the replicas did during the burst with apportion,
// from their metrics before and after.
type apportionCost struct {
	Placed       int                `json:"placedPods"`
	Decisions    map[string]float64 `json:"decisionsByResult"`
	Released     map[string]float64 `json:"releasedByReason"`
	Admissions   map[string]float64 `json:"admissionsByResult"`
	GateWait     promtext.Histogram `json:"gateWaitSeconds"`
	Admission    promtext.Histogram `json:"admissionSeconds"`
	Requests     map[string]float64 `json:"requestsByMethod"`
	PerPod       map[string]float64 `json:"requestsPerPlacedPod"`
	WritesPerPod float64            `json:"writesPerPlacedPod"`
	CPUPerPod    float64            `json:"cpuSecondsPerPlacedPod"`
	Replicas     []replicaCost      `json:"replicas"`
}

// writeMethods are the verbs that change something.
var writeMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// cost is the difference of two snapshots over placed pods; cached is the
// number of pods the replicas' informers held after.
func cost(before, after snapshot, leader string, placed, cached int) apportionCost {
	c := apportionCost{Placed: placed, Decisions: map[string]float64{}, Released: map[string]float64{},
		Admissions: map[string]float64{}, Requests: map[string]float64{}, PerPod: map[string]float64{}}
	names := make([]string, 0, len(after))
	for name := range after {
		names = append(names, name)
	}
	sort.Strings(names)
	var cpu float64
	for _, name := range names {
		a, b := after[name], before[name]
		addDelta(c.Decisions, a.By(mDecisions, "result"), b.By(mDecisions, "result"))
		addDelta(c.Released, a.By(mReleased, "reason"), b.By(mReleased, "reason"))
		addDelta(c.Admissions, a.By(mAdmitted, "result"), b.By(mAdmitted, "result"))
		addDelta(c.Requests, a.By(mRequests, "method"), b.By(mRequests, "method"))
		c.GateWait = addHistograms(c.GateWait, a.Histogram(mGateWait).Minus(b.Histogram(mGateWait)))
		c.Admission = addHistograms(c.Admission, a.Histogram(mAdmission).Minus(b.Histogram(mAdmission)))
		rc := replicaCost{Name: name, Leader: name == leader, CPUSeconds: a.Sum(mCPU, nil) - b.Sum(mCPU, nil),
			RSSBytes: a.Sum(mRSS, nil), HeapBytes: a.Sum(mHeap, nil)}
		if cached > 0 {
			rc.HeapPerPod = (a.Sum(mHeap, nil) - b.Sum(mHeap, nil)) / float64(cached)
		}
		cpu += rc.CPUSeconds
		c.Replicas = append(c.Replicas, rc)
	}
	if placed > 0 {
		for m, n := range c.Requests {
			c.PerPod[m] = n / float64(placed)
		}
		for _, m := range writeMethods {
			c.WritesPerPod += c.Requests[m] / float64(placed)
		}
		c.CPUPerPod = cpu / float64(placed)
	}
	return c
}

func addDelta(into, after, before map[string]float64) {
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			into[k] += d
		}
	}
}

// addHistograms adds two readings of the same histogram (of two replicas).
func addHistograms(a, b promtext.Histogram) promtext.Histogram {
	if len(a) == 0 {
		return b
	}
	out := make(promtext.Histogram, len(a))
	for i := range a {
		out[i] = a[i]
		if i < len(b) && b[i].LE == a[i].LE {
			out[i].Count += b[i].Count
		}
	}
	return out
}
