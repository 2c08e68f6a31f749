package drift

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/test"
)

// cached serves the controller's reads from an in-memory cache with the
// pod index by controller, as the informer caches do (a pod list is
// deep-copied, a limit is honoured); with read set, it counts the pods it
// hands out, by name.
type cached struct {
	client.Client
	*memcache.Reader
	read map[string]int
}

func (c *cached) Get(ctx context.Context, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	return c.Reader.Get(ctx, k, o, opts...)
}

func (c *cached) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if err := c.Reader.List(ctx, l, opts...); err != nil {
		return err
	}
	if pods, ok := l.(*corev1.PodList); ok && c.read != nil {
		for i := range pods.Items {
			c.read[pods.Items[i].Name]++
		}
	}
	return nil
}

// newCached is a drift controller over objs, the nodes od-1 and spot-1,
// the placed web/nginx (4 pods on on-demand, 6 on spot, within quota), and
// unplaced Deployments plain-0, plain-1... of perDeployment pods each.
func newCached(tb testing.TB, unplaced, perDeployment int, objs ...client.Object) (*cached, *Controller) {
	tb.Helper()
	c := &cached{Reader: memcache.New(test.Scheme())}
	if err := c.Index(&corev1.Pod{}, podcache.IndexController, podcache.ControllerIndex); err != nil {
		tb.Fatal(err)
	}
	objs = append(objs, test.Node("od-1", map[string]string{ct: "on-demand"}), test.Node("spot-1", map[string]string{ct: "spot"}))
	objs = append(objs, deployment("nginx", "a")...)
	objs = append(objs, pods("nginx", "a", "od-1", 0, 4)...)
	objs = append(objs, pods("nginx", "a", "spot-1", 4, 6)...)
	for i := range unplaced {
		name := fmt.Sprintf("plain-%d", i)
		plain := deployment(name, "a")
		delete(plain[0].GetAnnotations(), annotations.Strategy)
		objs = append(objs, plain...)
		objs = append(objs, pods(name, "a", "od-1", 0, perDeployment)...)
	}
	if err := c.Add(objs...); err != nil {
		tb.Fatal(err)
	}
	ctrl := NewController(clocktesting.NewFakeClock(epoch), c, apevents.NewRecorder(events.NewFakeRecorder(100)), &pools{}, Options{After: after, Exported: metrics.NewCapped(10)})
	return c, ctrl
}

// TestSweepReadsOnlyPlacedPods: a sweep reads the pods of the placed
// workloads, one pod of each other ReplicaSet (to resolve its workload),
// and no pod of no controller.
func TestSweepReadsOnlyPlacedPods(t *testing.T) {
	metrics.WorkloadPods.Reset()
	var bare []client.Object
	for i := range 50 {
		bare = append(bare, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("bare-%d", i), UID: types.UID(fmt.Sprintf("bare-%d", i))},
			NodeName: "od-1", Phase: corev1.PodRunning}))
	}
	c, ctrl := newCached(t, 2, 50, bare...)
	c.read = map[string]int{}
	if err := ctrl.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := podsGauge(odGroup, metrics.StateRunning) + podsGauge(ct+"=spot", metrics.StateRunning); got != 10 {
		t.Errorf("running pods of nginx %v, want 10", got)
	}
	placed, unplaced := 0, map[string]int{}
	for name, n := range c.read {
		switch {
		case strings.HasPrefix(name, "nginx-"):
			placed++
		case strings.HasPrefix(name, "plain-"):
			unplaced[strings.SplitN(name, "-a-", 2)[0]] += n
		default:
			t.Errorf("read %s, a pod of no controller, %d times", name, n)
		}
	}
	if placed != 10 {
		t.Errorf("read %d pods of nginx, want its 10", placed)
	}
	for rs, n := range unplaced {
		if n > 1 {
			t.Errorf("read %d pods of %s, which nothing places; want one", n, rs)
		}
	}
}

// BenchmarkSweep10kUnrelatedPods: a sweep over one placed workload of 10
// pods among 10,000 pods of 100 Deployments that nothing places.
func BenchmarkSweep10kUnrelatedPods(b *testing.B) {
	metrics.WorkloadPods.Reset()
	_, ctrl := newCached(b, 100, 100)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := ctrl.Sweep(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSweepResolvesPastFinishedPods: a controller whose first pod is
// finished is resolved by a live one, and the finished pod is not counted.
func TestSweepResolvesPastFinishedPods(t *testing.T) {
	metrics.WorkloadPods.Reset()
	failed := pods("nginx", "a", "od-1", 10, 1)[0].(*corev1.Pod)
	failed.Status.Phase = corev1.PodFailed
	_, ctrl := newCached(t, 0, 0, failed)
	if err := ctrl.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := podsGauge(odGroup, metrics.StateRunning); got != 4 {
		t.Errorf("running on on-demand %v, want 4", got)
	}
	if got := podsGauge(ct+"=spot", metrics.StateRunning); got != 6 {
		t.Errorf("running on spot %v, want 6", got)
	}
}
