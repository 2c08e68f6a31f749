package placement

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/lease"
)

// The Lease is checked twice per decision, at the pace of a burst: the check
// must not copy the Lease, or anything else.
func TestTheLeaseCheckDoesNotAllocate(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	key := client.ObjectKey{Namespace: "apportion", Name: "apportion-placement"}
	watch := lease.NewWatch(key)
	watch.OnAdd(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("apportion-0_1b4e")}}, true)
	c := &Controller{clock: clk}
	c.WithLease(Lease{Holder: watch, Identity: "apportion-0_1b4e", Renewed: clk.Now, Duration: 15 * time.Second})
	if ok, why, _ := c.leads(); !ok {
		t.Fatalf("a fresh Lease naming this replica does not lead: %s", why)
	}
	if n := testing.AllocsPerRun(100, func() { c.leads() }); n != 0 {
		t.Errorf("the Lease check allocates %v times, want none", n)
	}
}
