package deletioncost

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// TestReconcileOrdersStraysFirst: in a revision apportion places, a pod
// admitted without a decision gets a lower cost than every decided pod, a
// pod still held by the gate is left alone, and a revision with no decided
// pod is not touched at all.
func TestReconcileOrdersStraysFirst(t *testing.T) {
	const seed004 = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "nginx", UID: "deploy-uid",
		Annotations: map[string]string{annotations.Strategy: seed004}}}
	plain := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "plain", UID: "plain-uid"}}
	rs := func(name string, owner *appsv1.Deployment) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name + "-uid"),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}}}
	}
	placed, unplaced := rs("nginx-abc", deploy), rs("plain-xyz", plain)
	base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	pod := func(owner *appsv1.ReplicaSet, i int, group string, gated bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("%s-%d", owner.Name, i), UID: types.UID(fmt.Sprintf("%s-%d", owner.Name, i)),
			CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
			Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}}}
		if group != "" {
			p.Annotations = map[string]string{annotations.Group: group}
		}
		if gated {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
		}
		return p
	}
	const od, spot = "karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"
	objs := []client.Object{deploy, plain, placed, unplaced,
		pod(placed, 0, od, false), pod(placed, 1, od, false), pod(placed, 2, spot, false),
		pod(placed, 3, "", false), // stray
		pod(placed, 4, "", true),  // still gated
		pod(unplaced, 0, "", false), pod(unplaced, 1, "", false),
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, IndexOwnerKey, func(o client.Object) []string {
			if k := workload.OwnerKey(o.(*corev1.Pod)); k != "" {
				return []string{k}
			}
			return nil
		}).Build()
	ctrl := NewController(c)
	ctx := context.Background()
	for _, r := range []*appsv1.ReplicaSet{placed, unplaced} {
		if _, err := ctrl.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(r.UID)}}); err != nil {
			t.Fatal(err)
		}
	}
	cost := func(name string) (int, bool) {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "web", Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		v, ok := p.Annotations[Annotation]
		n, _ := strconv.Atoi(v)
		return n, ok
	}
	stray, ok := cost("nginx-abc-3")
	if !ok {
		t.Fatal("the stray pod got no deletion cost")
	}
	for i := range 3 {
		decided, ok := cost(fmt.Sprintf("nginx-abc-%d", i))
		if !ok || decided <= stray {
			t.Errorf("decided pod %d: cost %d (set %v), want above the stray's %d", i, decided, ok, stray)
		}
	}
	for _, name := range []string{"nginx-abc-4", "plain-xyz-0", "plain-xyz-1"} {
		if v, ok := cost(name); ok {
			t.Errorf("pod %s got cost %d; it should be left alone", name, v)
		}
	}
}
