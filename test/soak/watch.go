package main

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
)

// podRecord is what the watch saw of one of the workloads' pods. Times
// are the soak's clock when the event arrived.
type podRecord struct {
	workload string
	optIn    bool
	seen     time.Time // first event
	// passed is when the pod was first seen without the placement gate
	// (zero while gated): the moment its fate is known.
	passed  time.Time
	gated   bool // ever seen held by the gate
	decided bool // carried a decision when it passed the gate
	// deleting: seen with a deletion timestamp.
	deleting bool
}

// outcome is how a pod passed admission and the gate.
type outcome int

const (
	decided    outcome = iota
	failedOpen         // never gated, no decision: the webhook was not answered
	released           // held by the gate, then let go without a decision
)

func (r podRecord) outcome() outcome {
	switch {
	case r.decided:
		return decided
	case r.gated:
		return released
	default:
		return failedOpen
	}
}

// tracker keeps a podRecord per pod of the soak's workloads, and the
// informer's store of the pods themselves.
type tracker struct {
	mu    sync.Mutex
	pods  map[types.UID]*podRecord
	store cache.Store
	// notReadyRemoved is, per workload, when a pod of it was last deleted
	// while Running and not Ready: the ReplicaSet and StatefulSet
	// controllers remove not-ready pods first, whatever their
	// pod-deletion-cost, so such a scale-down may leave the split off
	// quota (the node lifecycle controller marks a node's pods not ready
	// when kwok's heartbeats lag on a loaded machine).
	notReadyRemoved map[string]removal
}

// removal is when a not-ready pod of a workload was deleted, and its pod
// template's revision (rolloutAnnotation): a rollout removes pods of an
// older revision, a scale-down pods of the current one.
type removal struct {
	at       time.Time
	revision string
}

// watchPods starts an informer on the pods labelled workloadLabel; it
// stops with ctx.
func watchPods(ctx context.Context, cfg *rest.Config) (*tracker, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a clientset: %w", err)
	}
	t := &tracker{pods: map[types.UID]*podRecord{}, notReadyRemoved: map[string]removal{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = workloadLabel
	}))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { t.observe(o, time.Now()) },
		UpdateFunc: func(_, o any) { t.observe(o, time.Now()) },
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	t.store = inf.GetStore()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("syncing the pod watch: %w", ctx.Err())
	}
	return t, nil
}

func (t *tracker) observe(o any, now time.Time) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.pods[p.UID]
	if r == nil {
		r = &podRecord{workload: p.Labels[workloadLabel], optIn: p.Labels[optInLabel] == "true", seen: now}
		t.pods[p.UID] = r
	}
	if p.DeletionTimestamp != nil && !r.deleting {
		r.deleting = true
		if p.Status.Phase == corev1.PodRunning && !podReady(p) {
			t.notReadyRemoved[r.workload] = removal{at: now, revision: p.Annotations[rolloutAnnotation]}
		}
	}
	if !r.passed.IsZero() {
		return
	}
	if decision.HasGate(p) {
		r.gated = true
		return
	}
	r.passed = now
	_, r.decided = p.Annotations[annotations.Group]
}

// removedNotReady returns when a pod of each workload was last deleted
// while not Ready, and its revision.
func (t *tracker) removedNotReady() map[string]removal {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.notReadyRemoved)
}

// records returns copies of every record so far.
func (t *tracker) records() []podRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]podRecord, 0, len(t.pods))
	for _, r := range t.pods {
		out = append(out, *r)
	}
	return out
}

// live returns the pods in the store that are neither being deleted nor
// finished, by workload.
func (t *tracker) live() map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, o := range t.store.List() {
		p, ok := o.(*corev1.Pod)
		if !ok || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out[p.Labels[workloadLabel]] = append(out[p.Labels[workloadLabel]], p)
	}
	return out
}

// admissions counts the pods that passed the gate in [from, to): by
// outcome, for opted-in pods, split by whether the pod was first seen
// during a frozen moment; and the pods first seen in that span.
type admissions struct {
	Seen       int `json:"podsCreated"`
	SeenFrozen int `json:"podsCreatedFrozen"`
	// Decided counts opted-in pods placed; Undecided those admitted or
	// released without a decision outside frozen moments, UndecidedFrozen
	// during them. PlainGated counts pods of workloads that did not opt
	// in that were held by the gate (none should be).
	Decided         int `json:"placed"`
	Undecided       int `json:"undecided"`
	UndecidedFrozen int `json:"undecidedFrozen"`
	PlainGated      int `json:"notOptedInGated"`
	FailedOpen      int `json:"failedOpen"`
	Released        int `json:"released"`
}

// count tallies recs for [from, to); frozen says whether a moment was
// within a frozen window.
func count(recs []podRecord, from, to time.Time, frozen func(time.Time) bool) admissions {
	var a admissions
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	for _, r := range recs {
		if in(r.seen) {
			a.Seen++
			if frozen(r.seen) {
				a.SeenFrozen++
			}
		}
		if r.passed.IsZero() || !in(r.passed) {
			continue
		}
		if !r.optIn {
			if r.gated {
				a.PlainGated++
			}
			continue
		}
		switch r.outcome() {
		case decided:
			a.Decided++
			continue
		case failedOpen:
			a.FailedOpen++
		case released:
			a.Released++
		}
		if frozen(r.seen) {
			a.UndecidedFrozen++
		} else {
			a.Undecided++
		}
	}
	return a
}
