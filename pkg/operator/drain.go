package operator

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// minimumDrain is how long the webhook server drains, at least, before it
// stops, counted from when draining began. Draining fails readiness
// (notDraining), so this is the time the Service's endpoints take to drop
// the replica: the chart's readiness probe (every 2 s, 2 failures) and the
// endpoints' update. On SIGTERM after the preStop sleep, draining began when
// the pod's deletion was seen, and little of it is left. When the manager
// stops without a SIGTERM (the placement Lease lost after a freeze), nothing
// drained before, and a replica that stopped at once would refuse the
// admissions the API server still sends it while it is Ready: each such pod
// is admitted without its decision.
const minimumDrain = 6 * time.Second

// drain moves the API server's admission calls off a replica that is going
// away. The API server keeps its connections to a webhook's pod open and
// reuses them after the pod has left the Service's endpoints; when the pod
// then stops, a call sent as the server closes an idle connection fails with
// EOF and the pod is admitted without its gate. While draining, every
// response carries "Connection: close": the API server closes the connection
// after reading it, and its next call dials one of the endpoints left. It
// begins when the replica's own pod is being deleted (seen in the pod cache,
// during the preStop sleep), or at SIGTERM. The webhook server speaks
// HTTP/1.1 only, where that header works (HTTP/2 has no per-response way to
// retire a connection).
type drain struct {
	clk   clock.PassiveClock
	since atomic.Int64 // UnixNano when draining began; 0: not draining
}

func newDrain(clk clock.PassiveClock) *drain { return &drain{clk: clk} }

// begin starts draining, once; later calls change nothing.
func (d *drain) begin(ctx context.Context, why string) {
	if d.since.CompareAndSwap(0, d.clk.Now().UnixNano()) {
		log.FromContext(ctx).Info("draining the webhook server: each admission connection is closed after its next response", "why", why)
	}
}

// draining reports whether draining has begun.
func (d *drain) draining() bool { return d.since.Load() != 0 }

// notDraining is a readiness check that fails once draining has begun, so
// that the replica leaves the Service's endpoints while it still serves.
func (d *drain) notDraining(_ *http.Request) error {
	if d.draining() {
		return errors.New("draining: the replica is stopping")
	}
	return nil
}

// left is how much of minimumDrain is left since draining began (all of it
// when it has not).
func (d *drain) left() time.Duration {
	since := d.since.Load()
	if since == 0 {
		return minimumDrain
	}
	return max(0, minimumDrain-d.clk.Since(time.Unix(0, since)))
}

// handler adds "Connection: close" to h's responses while draining.
func (d *drain) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.draining() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// ownPod watches the replica's own pod in the cache and begins draining
// once it is being deleted. It runs on every replica.
type ownPod struct {
	reader   client.Reader
	drain    *drain
	key      client.ObjectKey
	interval time.Duration
	clk      clock.WithTicker
}

// NeedLeaderElection is false: every replica serves admissions.
func (o *ownPod) NeedLeaderElection() bool { return false }

// Start checks the pod every interval until it is being deleted or ctx ends.
func (o *ownPod) Start(ctx context.Context) error {
	t := o.clk.NewTicker(o.interval)
	defer t.Stop()
	for {
		var pod corev1.Pod
		if err := o.reader.Get(ctx, o.key, &pod); err == nil && pod.DeletionTimestamp != nil {
			o.drain.begin(ctx, "pod "+o.key.String()+" is being deleted")
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}
