package deletioncost

import (
	"context"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// strayCostText is the strays' cost as the annotation holds it.
var strayCostText = strconv.Itoa(decision.StrayCost)

// Queue is where EventHandler puts the revisions to reconcile.
type Queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// EventHandler maps pod events to the revisions whose costs they may change,
// each reconciled the debounce after the first such event (the queue keeps
// the earliest time of a request already waiting): a burst of placements in
// one revision becomes one reconcile per debounce, not one per event.
//
// What may change costs: a decided pod that appears without a cost (placed
// before the placement controller wrote costs, or one whose cost it could not
// tell), the first decided pod of a revision (whose shadow pods take costs
// from then on, its workload having left shadow mode), a decided pod's cost
// edited, a decided pod leaving (terminating, finished, gone, or its
// decision no longer verifying), a stray appearing in a revision that holds
// decided pods, and, in a revision whose shadow pods take costs, such a pod
// bound, leaving or its cost edited. A pod placed with its cost in a
// revision already reconciled and the status updates of a running pod change
// nothing.
func (c *Controller) EventHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q Queue) {
			// A decided pod created is one the cache lists at start: each
			// revision is reconciled once then.
			if pod, ok := podcache.View(e.Object); ok {
				c.enqueue(q, pod, c.live(pod) || c.newStray(nil, pod))
			}
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q Queue) {
			old, ok1 := podcache.View(e.ObjectOld)
			pod, ok2 := podcache.View(e.ObjectNew)
			if ok1 && ok2 {
				c.enqueue(q, pod, c.changesCosts(old, pod))
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q Queue) {
			// controller-runtime hands over the last known object of a
			// tombstone; a pod seen terminating was enqueued then.
			if pod, ok := podcache.View(e.Object); ok {
				c.enqueue(q, pod, c.live(pod) || c.countedShadow(pod))
			}
		},
	}
}

// changesCosts reports whether an update of a pod may change its revision's
// costs.
func (c *Controller) changesCosts(old, pod *corev1.Pod) bool {
	was, is := c.live(old), c.live(pod)
	switch {
	case is && !was:
		// Just placed: the placement controller wrote its cost with the
		// decision when it could tell it. The first decided pod of a
		// revision (or the first since it was in shadow mode) is worth a
		// reconcile all the same: its shadow pods have no cost yet.
		_, has := pod.Annotations[Annotation]
		return !has || !c.shadowsCounted(pod)
	case is:
		return old.Annotations[Annotation] != pod.Annotations[Annotation]
	case was:
		return true // leaving the split
	}
	if c.countedShadow(old) || c.countedShadow(pod) {
		wasLive, isLive := !podutil.IsTerminating(old) && !podutil.IsTerminal(old), !podutil.IsTerminating(pod) && !podutil.IsTerminal(pod)
		return wasLive != isLive || old.Spec.NodeName != pod.Spec.NodeName || old.Annotations[Annotation] != pod.Annotations[Annotation]
	}
	return c.newStray(old, pod)
}

// shadowsCounted reports whether the pod's revision holds decided pods and
// its shadow pods take costs: its workload was not in shadow mode at its
// last reconcile.
func (c *Controller) shadowsCounted(pod *corev1.Pod) bool {
	key := ownerKey(pod)
	if key == "" {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.decided[pod.Namespace+"/"+key]
}

// countedShadow reports whether the pod was decided in shadow mode and its
// revision's shadow pods take costs.
func (c *Controller) countedShadow(pod *corev1.Pod) bool {
	return decision.HasShadow(pod) && c.shadowsCounted(pod) && !c.isDecided(pod) && c.isShadow(pod)
}

// live reports whether the pod is a decided pod that takes a cost.
func (c *Controller) live(pod *corev1.Pod) bool {
	return !podutil.IsTerminating(pod) && !podutil.IsTerminal(pod) && c.isDecided(pod)
}

// newStray reports whether pod is a stray of a revision with decided pods
// that does not carry the strays' cost yet, and was not such a stray before
// (old nil: a pod the cache just listed).
func (c *Controller) newStray(old, pod *corev1.Pod) bool {
	key := ownerKey(pod)
	if key == "" {
		return false
	}
	c.mu.Lock()
	placed := c.decided[pod.Namespace+"/"+key]
	c.mu.Unlock()
	return placed && c.stray(pod) && (old == nil || !c.stray(old))
}

// stray reports whether the pod is live, released by the gate without a
// decision, and without the strays' cost; a pod decided in shadow mode is
// none (it is left alone).
func (c *Controller) stray(p *corev1.Pod) bool {
	return !decision.HasGate(p) && !podutil.IsTerminating(p) && !podutil.IsTerminal(p) &&
		p.Annotations[Annotation] != strayCostText && !c.isDecided(p) && !c.isShadow(p)
}

// enqueue adds the pod's revision, when yes, after the debounce.
func (c *Controller) enqueue(q Queue, pod *corev1.Pod, yes bool) {
	if !yes {
		return
	}
	if key := ownerKey(pod); key != "" {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: key}}, c.debounce)
	}
}

// ownerKey is the revision whose costs the pod's events may change: its
// workload.OwnerKey, or "" for the pod of a Job or Workflow, which keeps no
// cost (the Job controller does not read it, and Argo deletes no pod).
func ownerKey(pod metav1.Object) string {
	if workload.IsBatch(pod) {
		return ""
	}
	return workload.OwnerKey(pod)
}
