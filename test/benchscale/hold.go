package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// holdGate is the scheduling gate of the pinned burst with --pinned-gated:
// in the pods' template, removed by the bench (releaser) as soon as it sees
// each pod. The pods then take the path apportion's take, created gated and
// released by one patch each, with no webhook and no decision: what gating
// alone costs the control plane.
const holdGate = "bench.apportion.dev/hold"

// releaserWorkers patch in parallel, as many as the placement controller's
// workers.
const releaserWorkers = 64

// releaser removes holdGate from the pods the watch sees holding it.
type releaser struct {
	kube    client.Client
	queue   chan types.NamespacedName
	seen    sync.Map // namespace/name -> struct{}: queued once
	patched atomic.Int64
	failed  atomic.Int64
}

func newReleaser(kube client.Client) *releaser {
	return &releaser{kube: kube, queue: make(chan types.NamespacedName, 1<<16)}
}

// start runs the workers until ctx ends.
func (r *releaser) start(ctx context.Context) {
	for range releaserWorkers {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case key := <-r.queue:
					r.release(ctx, key)
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
	case r.queue <- key:
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
// patch, as apportion's placement does with its decision.
func (r *releaser) release(ctx context.Context, key types.NamespacedName) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"schedulingGates":null}}`))
	if err := r.kube.Patch(ctx, pod, patch); err != nil {
		r.failed.Add(1)
		say("releasing %s: %v", key, err)
		return
	}
	r.patched.Add(1)
}

// summary is the releaser's counts for the report.
func (r *releaser) summary() string {
	return fmt.Sprintf("%d pods released by the bench, %d failed", r.patched.Load(), r.failed.Load())
}
