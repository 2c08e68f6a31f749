package main

import (
	"context"
	"net"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/webhook"
	"github.com/apportion-dev/apportion/test/framework"
	"github.com/apportion-dev/apportion/test/promtext"
)

// Metric names: the API server's request counter, and what every
// apportion replica exports (controller-runtime's client requests and
// leader election gauge, the process and Go collectors).
const (
	mAPIRequests = "apiserver_request_total"
	mRequests    = "rest_client_requests_total"
	mRSS         = "process_resident_memory_bytes"
	mHeap        = "go_memstats_heap_inuse_bytes"
	mGoroutines  = "go_goroutines"
	mAdmissions  = "apportion_admission_pods_total"
	mLeader      = "leader_election_master_status"
)

// writeVerbs are the API server's verbs (and client-go's methods) that
// change something.
var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE"}

// admissionResults are the values of apportion_admission_pods_total's result
// label the soak keeps per replica.
var admissionResults = []string{webhook.ResultGated, webhook.ResultSkipped, webhook.ResultShadow, webhook.ResultInvalid, webhook.ResultNoLeader, webhook.ResultError}

// replicaStat is one replica's process at a sample.
type replicaStat struct {
	Name       string  `json:"name"`
	Started    string  `json:"started"`
	Leader     bool    `json:"leader"`
	Frozen     bool    `json:"frozen,omitempty"`
	RSSMiB     float64 `json:"rssMiB"`
	HeapMiB    float64 `json:"heapInuseMiB"`
	Goroutines float64 `json:"goroutines"`
	// Writes are its API writes since the previous sample (all of them
	// for a replica new since).
	Writes float64 `json:"writes"`
	// Admissions counts its pod admissions by result since it started
	// (apportion_admission_pods_total): "no_leader" and "error" tell a pod
	// admitted without the gate by this replica from one whose admission
	// call failed open in the API server.
	Admissions map[string]float64 `json:"admissions,omitempty"`
	Error      string             `json:"error,omitempty"`
}

// minute is one sample: what happened since the previous one.
type minute struct {
	Index   int       `json:"index"`
	At      time.Time `json:"at"`
	Elapsed float64   `json:"elapsedMinutes"`
	Frozen  bool      `json:"frozen"`
	Events  []string  `json:"events"`
	admissions
	Settled  int      `json:"settled"`
	Within   int      `json:"withinQuota"`
	Off      int      `json:"offQuota"`
	OffWhy   []string `json:"offQuotaWhy,omitempty"`
	FellBack int      `json:"fellBack"`
	// WithUndecided counts the settled workloads with a pod that has no
	// decision (counted among the undecided pods), not held to the quota.
	WithUndecided int `json:"withUndecided"`
	// Survivors counts the settled workloads with pods that survived a
	// scale-down which removed a not-ready pod first, not held to the
	// quota.
	Survivors int `json:"survivors"`
	Unsettled int `json:"unsettled"`
	// Pending are the pods Pending past their capacity timeout now.
	Pending          []pendingPod `json:"pendingPastTimeout,omitempty"`
	PendingApportion int          `json:"pendingBecauseOfApportion"`
	// APIPodWrites are the API server's pod writes (every client) since
	// the previous sample; per pod created.
	APIPodWrites    float64       `json:"apiPodWrites"`
	WritesPerPod    float64       `json:"apiPodWritesPerPodCreated"`
	ApportionWrites float64       `json:"apportionWrites"`
	WritesPerPlaced float64       `json:"apportionWritesPerPlacedPod"`
	Replicas        []replicaStat `json:"replicas"`
	MaxRSSMiB       float64       `json:"maxRssMiB"`
	MaxHeapMiB      float64       `json:"maxHeapInuseMiB"`
	MaxGoroutines   float64       `json:"maxGoroutines"`
}

// within is the share of settled samples within quota, in percent (100
// when none was settled).
func (m minute) withinPercent() float64 {
	if m.Settled == 0 {
		return 100
	}
	return 100 * float64(m.Within) / float64(m.Settled)
}

// sampler takes the samples; it keeps the previous counter readings.
type sampler struct {
	e       *env
	m       *model
	ch      *churn
	start   time.Time
	pending time.Duration // capacity timeout, plus a node's launch

	prevAPI    float64
	prevWrites map[string]float64
	last       time.Time
}

const mib = 1 << 20

// capacityTimeout is the chart's default settings.capacityTimeout; a pod
// counts as Pending past it a node launch (30 s) later.
const capacityTimeout = 3 * time.Minute

func newSampler(ctx context.Context, e *env, m *model, ch *churn) *sampler {
	s := &sampler{e: e, m: m, ch: ch, start: time.Now(), pending: capacityTimeout + 30*time.Second, prevWrites: map[string]float64{}}
	s.last = s.start
	if text, err := e.apiserverMetrics(ctx); err == nil {
		s.prevAPI = podWrites(promtext.Parse(text))
	}
	s.scrapeReplicas()
	return s
}

func podWrites(s promtext.Scrape) float64 {
	var n float64
	for _, v := range writeVerbs {
		n += s.Sum(mAPIRequests, map[string]string{"resource": "pods", "verb": v})
	}
	return n
}

// take samples the span since the previous sample.
func (s *sampler) take(ctx context.Context, index int) minute {
	now := time.Now()
	from := s.last
	s.last = now
	row := minute{Index: index, At: now, Elapsed: now.Sub(s.start).Minutes(), Frozen: s.ch.overlapsFrozen(from, now)}
	for _, ev := range s.ch.eventsBetween(from, now) {
		row.Events = append(row.Events, ev.Kind)
	}
	row.admissions = count(s.e.pods.records(), from, now, s.ch.isFrozen)
	// The model first: a rollout it says is done is then in the objects
	// and pods read after.
	views := s.m.views()
	live := s.e.pods.live()
	s.settle(ctx, &row, views, live)
	row.Pending = pendingPast(live, s.pending, now)
	for _, p := range row.Pending {
		if p.Apportion {
			row.PendingApportion++
		}
	}
	if text, err := s.e.apiserverMetrics(ctx); err == nil {
		cur := podWrites(promtext.Parse(text))
		row.APIPodWrites = cur - s.prevAPI
		s.prevAPI = cur
	} else {
		say("%v", err)
	}
	if row.Seen > 0 {
		row.WritesPerPod = row.APIPodWrites / float64(row.Seen)
	}
	row.Replicas = s.scrapeReplicas()
	for _, r := range row.Replicas {
		row.ApportionWrites += r.Writes
		row.MaxRSSMiB = max(row.MaxRSSMiB, r.RSSMiB)
		row.MaxHeapMiB = max(row.MaxHeapMiB, r.HeapMiB)
		row.MaxGoroutines = max(row.MaxGoroutines, r.Goroutines)
	}
	if row.Decided > 0 {
		row.WritesPerPlaced = row.ApportionWrites / float64(row.Decided)
	}
	return row
}

// settle samples every Deployment and StatefulSet of views.
func (s *sampler) settle(ctx context.Context, row *minute, views []workloadView, live map[string][]*corev1.Pod) {
	rollouts := map[string]rollout{}
	for _, ns := range []string{nsAnnotated, nsPolicies, nsCluster} {
		var ds appsv1.DeploymentList
		if err := s.e.kube.List(ctx, &ds, client.InNamespace(ns)); err == nil {
			for i := range ds.Items {
				rollouts[kindDeployment+"."+ds.Items[i].Name] = deploymentRollout(&ds.Items[i])
			}
		}
		var ss appsv1.StatefulSetList
		if err := s.e.kube.List(ctx, &ss, client.InNamespace(ns)); err == nil {
			for i := range ss.Items {
				rollouts[kindStatefulSet+"."+ss.Items[i].Name] = statefulSetRollout(&ss.Items[i])
			}
		}
	}
	removed := s.e.pods.removedNotReady()
	var nodes corev1.NodeList
	nodeLabels := map[string]map[string]string{}
	if err := s.e.kube.List(ctx, &nodes); err == nil {
		for _, n := range nodes.Items {
			nodeLabels[n.Name] = n.Labels
		}
	}
	for _, w := range views {
		r, ok := rollouts[w.key]
		if !ok {
			row.Unsettled++
			continue
		}
		res := sampleWorkload(w.strategy, r, w.dirty, live[w.key], nodeLabels, removed[w.key])
		switch res.verdict {
		case unsettled:
			row.Unsettled++
		case fellBack:
			row.FellBack++
		case withUndecided:
			row.WithUndecided++
		case survivor:
			row.Survivors++
		case withinQuota:
			row.Settled++
			row.Within++
		case offQuota:
			row.Settled++
			row.Off++
			row.OffWhy = append(row.OffWhy, w.ns+"/"+w.key+": "+res.why)
		}
	}
}

// scrapeReplicas reads each running replica's metrics (not the frozen
// one's: it cannot answer).
func (s *sampler) scrapeReplicas() []replicaStat {
	frozen := s.ch.frozenName()
	var out []replicaStat
	seen := map[string]float64{}
	for name, p := range s.e.kubelet.Processes() {
		r := replicaStat{Name: name, Started: p.Started.Format(time.RFC3339), Frozen: name == frozen}
		if r.Frozen {
			out = append(out, r)
			if prev, ok := s.prevWrites[name]; ok {
				seen[name] = prev
			}
			continue
		}
		body, err := framework.HTTPGet(s.e.c, "http://"+net.JoinHostPort(p.IP, "8080")+"/metrics")
		if err != nil {
			r.Error = err.Error()
			out = append(out, r)
			continue
		}
		m := promtext.Parse(body)
		r.RSSMiB = m.Sum(mRSS, nil) / mib
		r.HeapMiB = m.Sum(mHeap, nil) / mib
		r.Goroutines = m.Sum(mGoroutines, nil)
		r.Leader = m.Sum(mLeader, map[string]string{"name": release}) == 1
		for _, result := range admissionResults {
			if v := m.Sum(mAdmissions, map[string]string{"result": result}); v > 0 {
				if r.Admissions == nil {
					r.Admissions = map[string]float64{}
				}
				r.Admissions[result] = v
			}
		}
		var writes float64
		for _, v := range writeVerbs {
			writes += m.Sum(mRequests, map[string]string{"method": v})
		}
		r.Writes = writes
		if prev, ok := s.prevWrites[name]; ok && writes >= prev {
			r.Writes = writes - prev
		}
		seen[name] = writes
		out = append(out, r)
	}
	s.prevWrites = seen
	sort.Slice(out, func(i, j int) bool {
		return out[i].Started < out[j].Started || out[i].Started == out[j].Started && out[i].Name < out[j].Name
	})
	return out
}

// sleep waits d or until ctx ends (its error then).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
