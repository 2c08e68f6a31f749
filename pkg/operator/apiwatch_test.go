package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// TestAPIWatchReportsAChange: the watch records which optional APIs are
// served at start and reports the first one that appears or goes away.
func TestAPIWatchReportsAChange(t *testing.T) {
	ctx := context.Background()
	nodePools := &metav1.APIResourceList{GroupVersion: "karpenter.sh/v1", APIResources: []metav1.APIResource{{Name: "nodepools", Kind: "NodePool"}}}
	d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	w, err := NewAPIWatch(d, time.Minute, capacity.NodePoolGVK, workload.RolloutGVK)
	if err != nil {
		t.Fatal(err)
	}
	if w.Served(capacity.NodePoolGVK) || w.Served(workload.RolloutGVK) {
		t.Fatal("nothing is served, yet the watch says otherwise")
	}
	if err := w.Check(ctx); err != nil {
		t.Fatalf("no change, yet: %v", err)
	}
	// Another kind of the same group version is not the NodePool API.
	d.Resources = []*metav1.APIResourceList{{GroupVersion: "karpenter.sh/v1", APIResources: []metav1.APIResource{{Name: "nodeclaims", Kind: "NodeClaim"}}}}
	if err := w.Check(ctx); err != nil {
		t.Fatalf("NodeClaim alone is not NodePool: %v", err)
	}
	d.Resources = []*metav1.APIResourceList{nodePools}
	if err := w.Check(ctx); err == nil || !strings.Contains(err.Error(), "the NodePool API (karpenter.sh/v1) is now served") {
		t.Fatalf("Karpenter installed after start: error %v", err)
	}

	// Started with Karpenter, which is then removed.
	w, err = NewAPIWatch(d, time.Minute, capacity.NodePoolGVK)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Served(capacity.NodePoolGVK) {
		t.Fatal("NodePool served, yet the watch says otherwise")
	}
	d.Resources = nil
	if err := w.Check(ctx); err == nil || !strings.Contains(err.Error(), "is no longer served") {
		t.Fatalf("Karpenter removed after start: error %v", err)
	}
}
