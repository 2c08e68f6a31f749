package placement

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/imagearch"
)

type countingImages struct {
	mu   sync.Mutex
	pods []string
}

func (c *countingImages) Pod(_ context.Context, pod *corev1.Pod) (*imagearch.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods = append(c.pods, pod.Name)
	return &imagearch.Result{}, nil
}

// TestImagesWarmedOnlyWhileNotLeading: a replica that does not lead inspects
// the images of gated pods (so that it takes over with a warm image cache);
// ungated pods are skipped, and once it leads, placement inspects them.
func TestImagesWarmedOnlyWhileNotLeading(t *testing.T) {
	images := &countingImages{}
	elected := make(chan struct{})
	w := &imageWarmer{images: images, wait: time.Second, elected: elected}
	gated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gated"},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}}}
	ungated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ungated"}}
	ctx := context.Background()
	for _, p := range []*corev1.Pod{gated, ungated} {
		if _, err := w.Reconcile(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	close(elected)
	if _, err := w.Reconcile(ctx, gated); err != nil {
		t.Fatal(err)
	}
	if len(images.pods) != 1 || images.pods[0] != "gated" {
		t.Errorf("inspected %v; want the gated pod once, before this replica led", images.pods)
	}
}
