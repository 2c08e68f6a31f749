package fallback

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/capacity"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
)

// warnOnce records a Warning Event on ref once an hour per reason and key;
// it reports whether it did.
func (c *Controller) warnOnce(ref *corev1.ObjectReference, reason, key, format string, args ...any) bool {
	return c.recorder.Publish(apevents.Event{Regarding: ref, Type: corev1.EventTypeWarning, Reason: reason, Action: "Detect",
		Message: fmt.Sprintf(format, args...), DedupeValues: []string{string(ref.UID), key}, DedupeTimeout: time.Hour})
}

// warnMisfit tells the workload that Karpenter finds no instance type of
// its pool for the pod: its own requests or constraints, which apportion
// leaves to the workload's owner.
func (c *Controller) warnMisfit(ctx context.Context, pod *corev1.Pod, ref *corev1.ObjectReference, key capacity.Key, detail string) {
	if c.warnOnce(ref, "PodDoesNotFit", key.Name(),
		"Karpenter finds no instance type of NodePool %s for pod %s (%s); apportion leaves the pod as it is: its own requests or constraints must change",
		key.Name(), pod.Name, detail) {
		log.FromContext(ctx).Info("pod fits no instance type of its NodePool; left alone", "nodepool", key.Name(),
			"workload", ref.Kind+" "+ref.Namespace+"/"+ref.Name, "detail", detail)
	}
}

// report emits what a new outage gives: a Warning Event on the workload of
// the pod that showed it, the metric, one log line.
func (c *Controller) report(ctx context.Context, pod *corev1.Pod, key capacity.Key, sig signal, until time.Time, ref *corev1.ObjectReference) {
	what := "NodePool " + key.Name()
	if key.Kind() == capacity.KindLabels {
		what = "node labels " + key.Name()
	}
	scope := "cluster"
	detail := sig.detail
	if sig.reason == ReasonLimits && sig.np != nil {
		used := sig.used
		if used == nil {
			used = c.usage(ctx, sig.np)
		}
		detail = capacity.Headroom(sig.np, used, c.requests(ctx, pod)) + "; " + detail
	}
	if key.Scope() != "" {
		scope = "workload"
		c.recorder.Eventf(ref, nil, corev1.EventTypeWarning, "CapacityUnavailable", "Detect",
			"%s gives this workload no capacity (%s: %s); its pending pods there are recreated and its pods go to its other groups until %s",
			what, sig.reason, detail, until.UTC().Format(time.RFC3339))
	} else {
		c.recorder.Eventf(ref, nil, corev1.EventTypeWarning, "CapacityUnavailable", "Detect",
			"%s cannot get capacity (%s: %s); its pending pods are recreated and pods go to the other groups until %s",
			what, sig.reason, detail, until.UTC().Format(time.RFC3339))
	}
	metrics.CapacityUnavailableTotal.WithLabelValues(key.Kind(), scope, sig.reason).Inc()
	c.updateGauge()
	log.FromContext(ctx).Info("capacity unavailable", "key", string(key), "scope", scope, "reason", sig.reason, "detail", detail,
		"until", until.UTC().Format(time.RFC3339), "workload", ref.Kind+" "+ref.Namespace+"/"+ref.Name)
}

// requests reads the pod's requests from the API (the cache drops
// containers); nil when it cannot.
func (c *Controller) requests(ctx context.Context, pod *corev1.Pod) corev1.ResourceList {
	if c.opts.APIReader == nil {
		return nil
	}
	full := &corev1.Pod{}
	if err := c.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), full); err != nil {
		return nil
	}
	return podRequests(full)
}

// queueKey queues every pending pod of key for deletion (the deleter checks
// each one); for a workload's key, only that workload's pods.
func (c *Controller) queueKey(ctx context.Context, key capacity.Key) {
	if c.opts.DeleteQPS <= 0 {
		return
	}
	var pods corev1.PodList
	if err := c.kubeClient.List(ctx, &pods, client.MatchingFields{PodKeyIndex: string(key.Base())}); err != nil {
		// Each pod's own reconcile queues it while the key is out.
		log.FromContext(ctx).Error(err, "listing the pods of a key out of capacity", "key", string(key))
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if key.Scope() != "" {
			if info, _ := c.resolve(ctx, pod); scopeOf(pod, info) != key.Scope() {
				continue
			}
		}
		c.queueDeletion(pod)
	}
}
