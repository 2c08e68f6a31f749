package drift

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/test"
)

// capped is web/name at 7 replicas of 2 on-demand (max 2) and 3 spot (max
// 3), with its pods: 2 on od-1, 5 on spot-1, the last released of them
// released beyond caps (signed by signer).
func capped(name string, released int, signer *decision.Signer) []client.Object {
	d := test.Deployment(metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name),
		Annotations: map[string]string{annotations.Strategy: odGroup + ",weight=1,max=2:" + ct + "=spot,weight=1,max=3"}})
	d.Spec.Replicas = ptr.To[int32](7)
	objs := []client.Object{d, test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: name + "-a", UID: types.UID(name + "-a")}, d)}
	objs = append(objs, pods(name, "a", "od-1", 0, 2)...)
	spot := pods(name, "a", "spot-1", 2, 5)
	for _, o := range spot[len(spot)-released:] {
		p := o.(*corev1.Pod)
		p.Spec.Affinity = nil
		decision.MarkBeyondCaps(p, decision.Record{Reason: "beyond_caps"}, signer.SignBeyondCaps(p.UID), nil)
	}
	return append(objs, spot...)
}

// TestReleasedBeyondCapsCountInNoGroup: the pods the placement controller
// released beyond caps count in no group, whatever their node. 2 of them
// on a spot node next to 2 on-demand and 3 spot pods are no drift, and spot
// runs 3; 3 of them next to 2 spot pods are (spot runs 2 of its 3), though
// counted by their node spot would run 5, 2 of them beyond caps.
func TestReleasedBeyondCapsCountInNoGroup(t *testing.T) {
	signer := decision.RandomSigner()
	f := newFixture(t, 10, append(capped("nginx", 2, signer), capped("churned", 3, signer)...)...)
	f.ctrl.opts.Signer = signer
	f.sweep(0)
	f.sweep(after + sweepPeriod)
	ev := f.events()
	if len(ev) != 1 || !strings.Contains(ev[0], "SplitDrift") || !strings.Contains(ev[0], ct+"=spot) 2 running, quota 3") {
		t.Errorf("Events %q, want one SplitDrift: spot runs 2, quota 3", ev)
	}
	if g := driftGauge("nginx"); g != 0 {
		t.Errorf("apportion_workload_drift of nginx %v, want 0", g)
	}
	if r := podsGauge(ct+"=spot", metrics.StateRunning); r != 3 {
		t.Errorf("spot running %v, want 3: the pods beyond caps are in no group", r)
	}
}
