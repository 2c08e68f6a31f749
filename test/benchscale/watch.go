package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
)

// benchLabel marks the bench's pods: the watch sees only them.
const benchLabel = "bench.apportion.dev/pod"

// podRecord is what the watch saw of one pod, with the time it first saw
// each step. Times are the bench's clock when the event arrived: the API
// server's timestamps have second resolution, too coarse for a burst.
type podRecord struct {
	workload string
	seen     time.Time // first event (creation, as observed)
	gated    bool      // seen holding the placement gate
	decided  time.Time // first seen with a decision (group annotation)
	bound    time.Time // first seen with a node
	running  time.Time // first seen Running
	group    string    // the decision's group
	node     string
	// created and scheduledAt are the API server's: creation and the
	// PodScheduled=True transition (second resolution).
	created     time.Time
	scheduledAt time.Time
	gone        bool
	// marked: unbound and marked Unschedulable by the scheduler, which
	// is what Karpenter provisions for.
	marked bool
	// done is Succeeded or Failed: a Job's pod no longer counted live.
	done bool
}

// podWatch keeps a podRecord per bench pod, by namespace and name.
type podWatch struct {
	mu   sync.Mutex
	pods map[string]map[string]*podRecord
	// hook, when set, sees every pod event (the releaser of
	// --pinned-gated).
	hook atomic.Pointer[func(*corev1.Pod)]
}

// watchPods starts an informer on the bench's pods; it stops with ctx.
func watchPods(ctx context.Context, cfg *rest.Config) (*podWatch, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a clientset: %w", err)
	}
	w := &podWatch{pods: map[string]map[string]*podRecord{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = benchLabel
	}))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.observe(o, false) },
		UpdateFunc: func(_, o any) { w.observe(o, false) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			w.observe(o, true)
		},
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("syncing the pod watch: %w", ctx.Err())
	}
	return w, nil
}

func (w *podWatch) observe(o any, deleted bool) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	if h := w.hook.Load(); h != nil && !deleted {
		(*h)(p)
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	ns := w.pods[p.Namespace]
	if ns == nil {
		ns = map[string]*podRecord{}
		w.pods[p.Namespace] = ns
	}
	r := ns[p.Name]
	if r == nil {
		r = &podRecord{workload: p.Labels["app"], seen: now, created: p.CreationTimestamp.Time}
		ns[p.Name] = r
	}
	r.update(p, now)
	r.gone = r.gone || deleted || p.DeletionTimestamp != nil
}

func (r *podRecord) update(p *corev1.Pod, now time.Time) {
	if decision.HasGate(p) {
		r.gated = true
	}
	if g := p.Annotations[annotations.Group]; g != "" && r.decided.IsZero() {
		r.decided, r.group = now, g
	}
	if p.Spec.NodeName != "" && r.bound.IsZero() {
		r.bound, r.node = now, p.Spec.NodeName
	}
	if p.Status.Phase == corev1.PodRunning && r.running.IsZero() {
		r.running = now
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		r.done = true
	}
	r.marked = false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			r.scheduledAt = c.LastTransitionTime.Time
		}
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && p.Spec.NodeName == "" {
			r.marked = true
		}
	}
}

// progress counts the live pods of ns: all, decided, bound, Running.
type progress struct{ pods, decided, bound, running, marked int }

func (w *podWatch) progress(ns string) progress {
	w.mu.Lock()
	defer w.mu.Unlock()
	var p progress
	for _, r := range w.pods[ns] {
		if r.gone {
			continue
		}
		p.pods++
		if !r.decided.IsZero() {
			p.decided++
		}
		if !r.bound.IsZero() {
			p.bound++
		}
		if !r.running.IsZero() {
			p.running++
		}
		if r.marked {
			p.marked++
		}
	}
	return p
}

// records returns copies of the live pods' records of ns.
func (w *podWatch) records(ns string) []podRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]podRecord, 0, len(w.pods[ns]))
	for _, r := range w.pods[ns] {
		if !r.gone {
			out = append(out, *r)
		}
	}
	return out
}

// all returns copies of the records of every pod of ns, deleted ones too.
func (w *podWatch) all(ns string) []podRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]podRecord, 0, len(w.pods[ns]))
	for _, r := range w.pods[ns] {
		out = append(out, *r)
	}
	return out
}

// live counts the pods of ns not yet deleted.
func (w *podWatch) live(ns string) int { return w.progress(ns).pods }
