package fallback

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/decision"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/test"
)

// tenantWorkload is a Deployment name (UID name-deploy-uid) and its
// ReplicaSet name-1 in namespace tenant.
func tenantWorkload(name string, ann map[string]string) []client.Object {
	deploy := test.Deployment(metav1.ObjectMeta{Namespace: "tenant", Name: name, UID: types.UID(name + "-deploy-uid"), Annotations: ann})
	return []client.Object{deploy, test.ReplicaSet(metav1.ObjectMeta{Namespace: "tenant", Name: name + "-1", UID: types.UID(name + "-rs-uid")}, deploy)}
}

// inTenant makes the pod one of the tenant workload's.
func inTenant(workload string) podOpt {
	return func(p *corev1.Pod) {
		p.Namespace = "tenant"
		p.OwnerReferences = test.OwnedBy("apps/v1", "ReplicaSet", workload+"-1", types.UID(workload+"-rs-uid"))
	}
}

// TestForgedDecisionsIgnored: decision annotations a tenant wrote by hand
// (no signature, one copied from another pod, one for another decision, one
// made with another key) are not a decision: whatever the pods ask for,
// however long they wait and whatever Karpenter says about them, no key is
// marked for anyone, no pod is deleted and no Event is written.
func TestForgedDecisionsIgnored(t *testing.T) {
	q := resource.MustParse
	at := now.Add(-10 * time.Minute)
	impossible := withRequests(corev1.ResourceList{corev1.ResourceCPU: q("1000")})
	placed := pendingPod("p1", "spot", at)
	unsigned := pendingPod("unsigned", "spot", at, inTenant("app"), impossible)
	delete(unsigned.Annotations, annotations.Signature)
	copied := pendingPod("copied", "spot", at, inTenant("app"), impossible)
	copied.Annotations[annotations.Signature] = placed.Annotations[annotations.Signature]
	otherPool := pendingPod("other-decision", "spot", at, inTenant("app"), impossible)
	otherPool.Annotations[annotations.Signature] = testSigner.Sign(otherPool.UID, spotGroup, "on-demand")
	otherGroup := pendingPod("other-group", "spot", at, inTenant("app"), impossible)
	otherGroup.Annotations[annotations.Signature] = testSigner.Sign(otherGroup.UID, "karpenter.sh/capacity-type=on-demand", "spot")
	otherKey := pendingPod("other-key", "spot", at, inTenant("app"), impossible)
	otherKey.Annotations[annotations.Signature] = decision.RandomSigner().Sign(otherKey.UID, spotGroup, "spot")
	forged := []*corev1.Pod{unsigned, copied, otherPool, otherGroup, otherKey}

	np := nodePool("spot", metav1.ConditionTrue, func(np *karpv1.NodePool) {
		np.Spec.Limits = karpv1.Limits(corev1.ResourceList{corev1.ResourceCPU: q("100")})
		np.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: q("100")}
	})
	objs := append(tenantWorkload("app", map[string]string{annotations.CapacityTimeout: "1s"}), np, placed)
	for _, p := range forged {
		objs = append(objs, p)
	}
	f := newFixture(t, Options{}, nil, nil, objs...)
	rec := &refRecorder{}
	f.ctrl.recorder = apevents.NewRecorder(rec)
	// Whatever Karpenter says about them.
	f.observe("tenant", "unsigned", capacity.EventFailedScheduling,
		`Failed to schedule pod, no instance type has enough resources, requirements=karpenter.sh/nodepool In [spot], resources={"cpu":"1000"}`, now.Add(-time.Minute))
	for _, p := range forged[1:] {
		f.observe("tenant", p.Name, capacity.EventFailedScheduling, exceedSpot, now.Add(-time.Minute))
	}
	f.observe("tenant", "copied", capacity.EventNominated, "Pod should schedule on: nodeclaim/spot-a", now.Add(-2*time.Minute))

	for _, step := range []time.Duration{0, 5 * time.Minute} {
		f.clock.Step(step)
		for _, p := range forged {
			got, _ := f.getIn("tenant", p.Name)
			if keys := f.ctrl.podIndex(got); keys != nil {
				t.Errorf("%s indexed under %q", p.Name, keys)
			}
			if res := f.reconcileIn("tenant", p.Name); res != (reconcile.Result{}) {
				t.Errorf("%s: %+v, want nothing to come back for", p.Name, res)
			}
		}
	}
	f.drain()
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("forged decisions marked %v", snap)
	}
	if evs := rec.take(); len(evs) != 0 {
		t.Fatalf("Events for forged decisions: %+v", evs)
	}
	if _, ok := f.get("p1"); !ok {
		t.Fatal("a pod of another namespace was deleted")
	}
	for _, p := range forged {
		if _, ok := f.getIn("tenant", p.Name); !ok {
			t.Errorf("%s deleted", p.Name)
		}
	}
	// A NodePool event brings back the signed pods only.
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer queue.ShutDown()
	f.ctrl.enqueuePool(context.Background(), "spot", queue)
	if queue.Len() != 1 {
		t.Errorf("%d pods of spot enqueued, want the signed one", queue.Len())
	}
	// Even while the pool is out for everyone, a forged pod is not deleted.
	f.tracker.Mark(capacity.PoolKey("spot"), ReasonNotReady)
	for _, p := range forged {
		f.enqueue(client.ObjectKeyFromObject(p))
	}
	f.drain()
	for _, p := range forged {
		if _, ok := f.getIn("tenant", p.Name); !ok {
			t.Errorf("%s deleted while the pool is out", p.Name)
		}
	}
}

// TestTenantWorkloadScoped: a tenant's signed pods stuck in a Ready pool
// mark it for their workload only; only that workload's pods are queued
// and deleted, never another workload's or another namespace's pending pods
// of the pool.
func TestTenantWorkloadScoped(t *testing.T) {
	spot := capacity.PoolKey("spot")
	const otherParts = "Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [on-demand]; " +
		"incompatible requirements, key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [eu-west-1c] not in topology.kubernetes.io/zone In [eu-west-1a, eu-west-1b]"
	for _, tc := range []struct {
		name   string
		reason string
		events func(f *fixture)
	}{
		// Karpenter failed it (about other pools only), nominated it to
		// nothing and launched nothing.
		{"no nomination", ReasonNoNodeClaim, func(f *fixture) {
			f.observe("tenant", "a", capacity.EventFailedScheduling, otherParts, now.Add(-10*time.Second))
		}},
		// Karpenter failed it, then nominated it: its timeout (1s,
		// raised to 30s) ran out.
		{"timeout", ReasonTimeout, func(f *fixture) {
			f.observe("tenant", "a", capacity.EventFailedScheduling, otherParts, now.Add(-50*time.Second))
			f.observe("tenant", "a", capacity.EventNominated, "Pod should schedule on: nodeclaim/spot-a", now.Add(-40*time.Second))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := now.Add(-5 * time.Minute)
			objs := append(tenantWorkload("app", map[string]string{annotations.CapacityTimeout: "1s"}), tenantWorkload("other", nil)...)
			objs = append(objs, nodePool("spot", metav1.ConditionTrue), nodePool("on-demand", metav1.ConditionTrue),
				pendingPod("a", "spot", at, inTenant("app")), pendingPod("b", "spot", at, inTenant("app")),
				pendingPod("o1", "spot", at, inTenant("other")),
				pendingPod("p1", "spot", at), pendingPod("od", "on-demand", at))
			f := newFixture(t, Options{}, nil, nil, objs...)
			rec := &refRecorder{}
			f.ctrl.recorder = apevents.NewRecorder(rec)
			tc.events(f)

			f.reconcileIn("tenant", "a")
			mine := capacity.Scoped("app-deploy-uid", spot)
			if out, reason := f.out(mine); !out || reason != tc.reason {
				t.Fatalf("the workload's key: out %v reason %q; want %s", out, reason, tc.reason)
			}
			for _, k := range []capacity.Key{spot, capacity.Scoped("other-deploy-uid", spot), capacity.Scoped("deploy-uid", spot)} {
				if out, _ := f.out(k); out {
					t.Errorf("%s out", k)
				}
			}
			var queued []string
			for _, n := range f.queued() {
				queued = append(queued, n.String())
			}
			sort.Strings(queued)
			if strings.Join(queued, ",") != "tenant/a,tenant/b" {
				t.Errorf("queued %q, want the workload's pods only", queued)
			}
			app := corev1.ObjectReference{Kind: "Deployment", Namespace: "tenant", Name: "app", UID: "app-deploy-uid"}
			var unavailable int
			for _, ev := range rec.take() {
				if ev.regarding != app {
					t.Errorf("Event on %+v: %s %s", ev.regarding, ev.reason, ev.note)
				}
				if ev.reason == "CapacityUnavailable" {
					unavailable++
					if !strings.Contains(ev.note, "NodePool spot gives this workload no capacity ("+tc.reason+": ") {
						t.Errorf("CapacityUnavailable %q", ev.note)
					}
				}
			}
			if unavailable != 1 {
				t.Errorf("%d CapacityUnavailable Events, want 1", unavailable)
			}
			f.drain()
			for _, n := range []types.NamespacedName{{Namespace: "tenant", Name: "o1"}, {Namespace: "web", Name: "p1"}} {
				f.enqueue(n) // the deleter checks whatever is queued
			}
			f.drain()
			for name, want := range map[types.NamespacedName]bool{
				{Namespace: "tenant", Name: "a"}: false, {Namespace: "tenant", Name: "b"}: false,
				{Namespace: "tenant", Name: "o1"}: true, {Namespace: "web", Name: "p1"}: true, {Namespace: "web", Name: "od"}: true,
			} {
				if _, ok := f.getIn(name.Namespace, name.Name); ok != want {
					t.Errorf("%s exists %v, want %v", name, ok, want)
				}
			}
		})
	}
}
