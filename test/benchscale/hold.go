package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
	podworkload "github.com/apportion-dev/apportion/pkg/workload"
)

// holdGate is the scheduling gate of the pinned burst with --pinned-gated:
// in the pods' template, removed by the bench (releaser) as soon as it sees
// each pod. The pods then take the path apportion's take, created gated and
// released by one patch each, with no webhook and no decision: what gating
// alone costs the control plane. With --pinned-decision the patch also
// writes the decision apportion would (decider): what the decision's
// content costs on top.
const holdGate = "bench.apportion.dev/hold"

// releaserWorkers patch in parallel, as many as the placement controller's
// workers.
const releaserWorkers = 64

// releaser removes holdGate from the pods the watch sees holding it.
type releaser struct {
	kube  client.Client
	queue chan *corev1.Pod
	seen  sync.Map // namespace/name -> struct{}: queued once
	// decider, when set, makes the decision each release writes
	// (--pinned-decision).
	decider *decider
	patched atomic.Int64
	failed  atomic.Int64
}

func newReleaser(kube client.Client, d *decider) *releaser {
	return &releaser{kube: kube, decider: d, queue: make(chan *corev1.Pod, 1<<16)}
}

// start runs the workers until ctx ends.
func (r *releaser) start(ctx context.Context) {
	for range releaserWorkers {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-r.queue:
					r.release(ctx, p)
				}
			}
		}()
	}
}

// observe queues p once if it holds holdGate.
func (r *releaser) observe(p *corev1.Pod) {
	if !holds(p) {
		return
	}
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	if _, loaded := r.seen.LoadOrStore(key, struct{}{}); loaded {
		return
	}
	select {
	case r.queue <- p:
	default:
		r.failed.Add(1) // never in a burst the queue's size holds
	}
}

func holds(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == holdGate {
			return true
		}
	}
	return false
}

// release removes the pod's gates (the bench's pods have no other) in one
// patch, as apportion's placement does with its decision; with a decider,
// the same patch writes the decision it makes for the pod.
func (r *releaser) release(ctx context.Context, p *corev1.Pod) {
	var err error
	if r.decider == nil {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}}
		err = r.kube.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"schedulingGates":null}}`)))
	} else {
		var d decision.Decision
		if d, err = r.decider.decide(p); err == nil {
			err = decision.Write(ctx, r.kube, p, false, func(pod *corev1.Pod) {
				decision.Apply(pod, d)
				pod.Spec.SchedulingGates = nil
			})
		}
	}
	if err != nil {
		r.failed.Add(1)
		say("releasing %s/%s: %v", p.Namespace, p.Name, err)
		return
	}
	r.patched.Add(1)
}

// decider makes, for the pinned pods of --pinned-decision, the decision
// apportion's placement would write for the group each pod is pinned to: the
// group's labels, the NodePool apportion's capacity code picks for it, the
// images' architectures, the NodePool's tolerations, a deletion cost and the
// signed decision record with the counts seen, so that the patch that
// releases the pod carries what apportion's does. The workload's pods are
// counted per group as they are released.
type decider struct {
	signer    *decision.Signer
	archs     []string
	workloads map[string]*decidedWorkload // by the pods' app label
}

type decidedWorkload struct {
	strategy *compiled.Strategy
	choices  []catalog.Choice
	mu       sync.Mutex
	counts   []int64
}

// newDecider picks the NodePool of every group of each workload's strategy
// once, through apportion's own choice over the cluster's NodePools, for
// pods of podSpec running on archs.
func newDecider(ctx context.Context, kube client.Reader, ws []workload, spec corev1.PodSpec, archs []string) (*decider, error) {
	pools := &capacity.NodePoolCapacity{Reader: kube}
	pod := &corev1.Pod{Spec: spec}
	d := &decider{signer: decision.RandomSigner(), archs: archs, workloads: map[string]*decidedWorkload{}}
	for _, w := range ws {
		s, err := compiled.Parse(w.strategy)
		if err != nil {
			return nil, err
		}
		choices, errs, err := pools.Choose(ctx, s.Strategy, pod, archs, "")
		if err = errors.Join(append(errs, err)...); err != nil {
			return nil, fmt.Errorf("choosing the NodePools of %s: %w", w.name, err)
		}
		d.workloads[w.name] = &decidedWorkload{strategy: s, choices: choices, counts: make([]int64, len(s.Strategy.Groups))}
	}
	return d, nil
}

// decide is the decision for pod, pinned to its group by the pinned
// Deployment's groupLabel, counted in its workload.
func (d *decider) decide(pod *corev1.Pod) (decision.Decision, error) {
	w, ok := d.workloads[pod.Labels["app"]]
	g, err := strconv.Atoi(pod.Labels[groupLabel])
	if !ok || err != nil || g < 0 || g >= len(w.choices) {
		return decision.Decision{}, fmt.Errorf("no pinned group for the pod (labels %v)", pod.Labels)
	}
	group := w.strategy.Strategy.Groups[g]
	w.mu.Lock()
	counts := slices.Clone(w.counts)
	w.counts[g]++
	w.mu.Unlock()
	out := decision.Decision{
		Group:         group,
		NodePool:      w.choices[g].PoolName(),
		Architectures: d.archs,
		Tolerations:   w.choices[g].Tolerations,
		Record: decision.Record{Strategy: w.strategy.Hash, Revision: pod.Labels[podworkload.PodTemplateHashLabel],
			Counts: counts, Reason: placement.RecordQuota},
	}
	if arch, ok := group.Selector()[corev1.LabelArchStable]; ok {
		out.Architectures = []string{arch}
	}
	if cost, ok := decision.GroupCost(w.strategy.Method, g, counts[g]+1); ok {
		out.DeletionCost = &cost
	}
	out.Signature = d.signer.Sign(pod.UID, group.Key(), out.NodePool)
	return out, nil
}

// summary is the releaser's counts for the report.
func (r *releaser) summary() string {
	return fmt.Sprintf("%d pods released by the bench, %d failed", r.patched.Load(), r.failed.Load())
}
