package placement

import (
	"context"
	"time"

	"github.com/jellydator/ttlcache/v3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/metrics"
)

// RetryInterval is how soon a pod is tried again after an API error.
const RetryInterval = time.Second

// Retrier schedules another attempt at a pod after an API error other than a
// conflict or not-found: the error is counted in
// apportion_placement_api_errors_total and logged once per pod and operation
// for an hour (a reconciler that returns the error would be logged on every
// retry). The gate janitor bounds how long a pod is held while the API keeps
// failing.
type Retrier struct {
	logged *ttlcache.Cache[string, struct{}]
}

// NewRetrier returns a Retrier that remembers up to 4,096 failing pods.
func NewRetrier() *Retrier {
	return &Retrier{logged: ttlcache.New(ttlcache.WithTTL[string, struct{}](time.Hour), ttlcache.WithCapacity[string, struct{}](4096))}
}

// Retry counts and logs err for operation on pod and returns the result that
// comes back after RetryInterval. While the controller stops (ctx done, so
// every call fails), nothing is retried: a retry would put the pod back in a
// queue that the stopping workers drain, and keep them busy past the
// manager's grace period; the next leader places the pod.
func (r *Retrier) Retry(ctx context.Context, pod *corev1.Pod, operation string, err error) reconcile.Result {
	if ctx.Err() != nil {
		return reconcile.Result{}
	}
	metrics.APIErrorsTotal.WithLabelValues(operation).Inc()
	key := operation + "/" + string(pod.UID)
	if !r.logged.Has(key) {
		r.logged.Set(key, struct{}{}, ttlcache.DefaultTTL)
		log.FromContext(ctx).Error(err, "API call failed; retrying", "operation", operation, "retryAfter", RetryInterval.String())
	}
	return reconcile.Result{RequeueAfter: RetryInterval}
}
