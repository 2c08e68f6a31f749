package fallback

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/test"
)

// Karpenter's Events can be written by any identity that may create Events
// in a namespace: they are hints. These tests forge each kind in namespace
// tenant and check that another namespace's pending pod of the same pool
// (web/p1) is neither marked out nor deleted.

// atLimitPool is spot with its cpu limit used up: a limits Event about any
// pod of it would be backed by its state.
func atLimitPool() *karpv1.NodePool {
	q := resource.MustParse
	return nodePool("spot", metav1.ConditionTrue, func(np *karpv1.NodePool) {
		np.Spec.Limits = karpv1.Limits(corev1.ResourceList{corev1.ResourceCPU: q("10")})
		np.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: q("10")}
	})
}

// forgedPodEvent is a Karpenter-looking Event written in namespace about
// the pod it names (namespace/name, uid).
func forgedPodEvent(namespace, name string, uid types.UID, reason, message string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("%s.%s", name, strings.ToLower(reason))},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: uid},
		Reason:         reason, Message: message, Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: capacity.KarpenterComponent}, LastTimestamp: metav1.NewTime(at),
	}
}

// checkVictimUntouched: web/p1 was not marked out for anyone and is still
// there after the deleter ran.
func checkVictimUntouched(t *testing.T, f *fixture) {
	t.Helper()
	f.reconcile("p1")
	for _, k := range []capacity.Key{capacity.PoolKey("spot"), capacity.Scoped("deploy-uid", capacity.PoolKey("spot"))} {
		if out, reason := f.out(k); out {
			t.Errorf("%s out (%s)", k, reason)
		}
	}
	f.enqueue(types.NamespacedName{Namespace: "web", Name: "p1"})
	f.drain()
	if _, ok := f.get("p1"); !ok {
		t.Error("web/p1 deleted")
	}
}

// checkLimitsScopedToTenant: a limits FailedScheduling on the tenant's pod
// name (of workload), which the pool's state does not back, marks nothing at
// first (the state may trail the Event), then after Grace the tenant's
// workload only; web/p1 is untouched.
func checkLimitsScopedToTenant(t *testing.T, f *fixture, name, workload string) {
	t.Helper()
	f.observe("tenant", name, capacity.EventFailedScheduling, exceedSpot, now)
	if res := f.reconcileIn("tenant", name); res.RequeueAfter != Grace {
		t.Errorf("RequeueAfter %s, want Grace for the state to show the round's NodeClaims", res.RequeueAfter)
	}
	if snap := f.tracker.Snapshot(); len(snap) != 0 {
		t.Fatalf("marked on the Event alone: %v", snap)
	}
	f.clock.Step(Grace)
	f.reconcileIn("tenant", name)
	if out, reason := f.out(capacity.Scoped(workload+"-deploy-uid", capacity.PoolKey("spot"))); !out || reason != ReasonLimits {
		t.Fatalf("the tenant's workload: out %v reason %q; want limits", out, reason)
	}
	checkVictimUntouched(t, f)
}

// TestPoolEventOnlyFromKarpenterNamespace: Karpenter writes its Events about
// a NodePool in PoolEventNamespace. One in a tenant's namespace, one that
// claims a namespace for the NodePool, and one naming another NodePool's
// UID mark nothing, though the pool's state would back them; Karpenter's own
// marks the pool.
//
// (Any namespace's NoCompatibleInstanceTypes used to mark the pool out for
// every workload.)
func TestPoolEventOnlyFromKarpenterNamespace(t *testing.T) {
	np := noTypesPool()
	f := newFixture(t, Options{}, nil, nil, np, noTypesClaim(), pendingPod("p1", "spot", now.Add(-5*time.Second)))
	inTenant := noTypesEvent("tenant", np, now)
	namespaced := noTypesEvent(PoolEventNamespace, np, now)
	namespaced.InvolvedObject.Namespace = "tenant"
	otherUID := noTypesEvent(PoolEventNamespace, np, now)
	otherUID.InvolvedObject.UID = "an-old-spot-uid"
	for name, ev := range map[string]*corev1.Event{"in the tenant's namespace": inTenant, "namespaced NodePool": namespaced} {
		if pod, pool := f.ctrl.ObserveEvent(ev); pod.Name != "" || pool != "" {
			t.Errorf("%s: read (%v %q)", name, pod, pool)
		}
	}
	f.ctrl.ObserveEvent(otherUID)
	checkVictimUntouched(t, f)

	f.ctrl.ObserveEvent(noTypesEvent(PoolEventNamespace, np, now.Add(time.Second)))
	f.reconcile("p1")
	if out, reason := f.out(capacity.PoolKey("spot")); !out || reason != ReasonNoInstanceTypes {
		t.Fatalf("Karpenter's own Event: out %v reason %q; want no_instance_types", out, reason)
	}
}

// TestLimitsNeedTheState: a tenant's pod that asks for more cpu than the
// pool's whole limit, pinned to it, with a limits FailedScheduling (forged
// or not) while the pool has 38 of 40 nodes and almost all its cpu left:
// the pool's state does not back the Event, so after Grace (the state may
// trail the Event) it marks the tenant's workload only. Another namespace's
// pod of the pool is not marked or deleted, and the only Event is on the
// tenant's workload.
//
// (The pool used to be marked out for every workload at once: the only
// check was that it has limits.)
func TestLimitsNeedTheState(t *testing.T) {
	q := resource.MustParse
	np := nodePool("spot", metav1.ConditionTrue, func(np *karpv1.NodePool) {
		np.Spec.Limits = karpv1.Limits(corev1.ResourceList{corev1.ResourceCPU: q("160"), "nodes": q("40")})
		np.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: q("8"), "nodes": q("2")}
	})
	node := corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("16Gi")}
	objs := append(tenantWorkload("big", nil), np, launchedClaim("spot-a", node), launchedClaim("spot-b", node),
		pendingPod("p1", "spot", now.Add(-time.Minute)),
		pendingPod("huge", "spot", now.Add(-time.Minute), inTenant("big"), withRequests(corev1.ResourceList{corev1.ResourceCPU: q("500")})))
	f := newFixture(t, Options{}, nil, nil, objs...)
	f.ctrl.opts.APIReader = f.client
	rec := &refRecorder{}
	f.ctrl.recorder = apevents.NewRecorder(rec)
	checkLimitsScopedToTenant(t, f, "huge", "big")
	big := corev1.ObjectReference{Kind: "Deployment", Namespace: "tenant", Name: "big", UID: "big-deploy-uid"}
	evs := rec.take()
	if len(evs) != 1 || evs[0].regarding != big || !strings.Contains(evs[0].note, "NodePool spot gives this workload no capacity (limits: ") ||
		!strings.Contains(evs[0].note, "nodes 38 of 40 left") {
		t.Fatalf("Events %+v; want one CapacityUnavailable on the tenant's workload naming the headroom", evs)
	}
}

// TestPodEvidenceKeyedByNamespaceNameUID: Events written in the tenant's
// namespace that carry the UID of web/p1 (its name or another) say nothing
// about it: no limits mark from a forged FailedScheduling, and a forged
// Nominated does not keep it from being recreated while its pool is out.
// An Event in web that names p1's UID under another name says nothing
// either.
//
// (Pod evidence used to be keyed by UID alone.)
func TestPodEvidenceKeyedByNamespaceNameUID(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, atLimitPool(), pendingPod("p1", "spot", now.Add(-time.Minute)))
	uid := types.UID("p1-uid")
	f.ctrl.ObserveEvent(forgedPodEvent("tenant", "p1", uid, capacity.EventFailedScheduling, exceedSpot, now))
	f.ctrl.ObserveEvent(forgedPodEvent("tenant", "x", uid, capacity.EventFailedScheduling, exceedSpot, now))
	f.ctrl.ObserveEvent(forgedPodEvent("web", "renamed", uid, capacity.EventFailedScheduling, exceedSpot, now))
	checkVictimUntouched(t, f)

	// The pool is out for everyone (its own state): a forged nomination
	// does not hold p1 back.
	f.ctrl.ObserveEvent(forgedPodEvent("tenant", "p1", uid, capacity.EventNominated, "Pod should schedule on: nodeclaim/spot-a", now))
	f.tracker.Mark(capacity.PoolKey("spot"), ReasonNotReady)
	f.enqueue(types.NamespacedName{Namespace: "web", Name: "p1"})
	f.drain()
	if _, ok := f.get("p1"); ok {
		t.Error("web/p1 kept while its pool is out: a tenant's Nominated Event held it back")
	}
}

// TestPodEvidencePartitioned: a namespace that floods Karpenter-looking
// Events (more than the old shared cache held) does not push out what
// Karpenter said about another namespace's pod: web/p1's limits Event
// still marks its pool (at its limits) afterwards.
//
// (The pods' evidence used to share one cache of 200,000.)
func TestPodEvidencePartitioned(t *testing.T) {
	f := newFixture(t, Options{}, nil, nil, atLimitPool(), pendingPod("p1", "spot", now.Add(-time.Minute)))
	f.failedScheduling("p1", exceedSpot, now)
	ev := forgedPodEvent("tenant", "", "", capacity.EventFailedScheduling, exceedSpot, now)
	for i := range 200_001 {
		ev.InvolvedObject.Name = "flood-" + strconv.Itoa(i)
		ev.InvolvedObject.UID = types.UID(ev.InvolvedObject.Name)
		f.ctrl.ObserveEvent(ev)
	}
	f.reconcile("p1")
	if out, reason := f.out(capacity.PoolKey("spot")); !out || reason != ReasonLimits {
		t.Fatalf("out %v reason %q; want limits from web/p1's own Event", out, reason)
	}
}

// TestLimitsBacked: the pool's state backs a limits finding when a limit
// leaves less than every instance type the pool allows has (as far as its
// requirements and the launched instance types show), nothing of a resource
// every node has, or less than nothing. The nodes the pool has launched are
// no bound on what else it allows.
func TestLimitsBacked(t *testing.T) {
	q := resource.MustParse
	const gpu = corev1.ResourceName("nvidia.com/gpu")
	small := corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("4Gi")}
	big := corev1.ResourceList{corev1.ResourceCPU: q("8"), corev1.ResourceMemory: q("32Gi"), gpu: q("1")}
	launched := []*karpv1.NodeClaim{typedClaim("spot-s", "spot", "c-2x", small), typedClaim("spot-b", "spot", "g-8x", big)}
	named := []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(corev1.LabelInstanceTypeStable, "c-2x", "g-8x")}
	cpuLimit := corev1.ResourceList{corev1.ResourceCPU: q("20")}
	for _, tc := range []struct {
		name   string
		reqs   []karpv1.NodeSelectorRequirementWithMinValues
		limits corev1.ResourceList
		used   corev1.ResourceList
		claims []*karpv1.NodeClaim
		want   bool
	}{
		{"cpu left below every named type", named, cpuLimit, corev1.ResourceList{corev1.ResourceCPU: q("19")}, launched, true},
		{"cpu left for the smallest named type", named, cpuLimit, corev1.ResourceList{corev1.ResourceCPU: q("18")}, launched, false},
		// Only larger nodes launched, and the requirements name no type.
		{"cpu left below every launched node, types not named", nil, cpuLimit, corev1.ResourceList{corev1.ResourceCPU: q("19")}, launched, false},
		{"a named type never launched", []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(corev1.LabelInstanceTypeStable, "c-2x", "c-1x")},
			cpuLimit, corev1.ResourceList{corev1.ResourceCPU: q("19")}, launched, false},
		// An arm64 type of 1 cpu is named, but the pool is amd64.
		{"a named type the requirements rule out", []karpv1.NodeSelectorRequirementWithMinValues{
			test.Requirement(corev1.LabelInstanceTypeStable, "c-2x", "a-1x"), test.Requirement(corev1.LabelArchStable, "amd64")},
			cpuLimit, corev1.ResourceList{corev1.ResourceCPU: q("19")}, append(launched, armClaim("od-a", "a-1x", corev1.ResourceList{corev1.ResourceCPU: q("1")})), true},
		{"cpu used up, nothing known", nil, cpuLimit, cpuLimit, nil, true},
		{"cpu left, nothing known", nil, cpuLimit, corev1.ResourceList{corev1.ResourceCPU: q("19")}, nil, false},
		{"nodes used up", nil, corev1.ResourceList{"nodes": q("2")}, nil, launched, true},
		{"a node left", nil, corev1.ResourceList{"nodes": q("3")}, nil, launched, false},
		// Nodes without GPUs can still launch.
		{"gpus used up", named, corev1.ResourceList{gpu: q("1")}, nil, launched, false},
		{"gpus above the limit", nil, corev1.ResourceList{gpu: q("1")}, corev1.ResourceList{gpu: q("2")}, launched[:1], true},
		// The providers' size labels bound the types by themselves.
		{"aws instance-cpu above what is left", []karpv1.NodeSelectorRequirementWithMinValues{{Key: "karpenter.k8s.aws/instance-cpu", Operator: corev1.NodeSelectorOpGt, Values: []string{"3"}}},
			cpuLimit, corev1.ResourceList{corev1.ResourceCPU: q("17")}, nil, true},
		{"aws instance-cpu within what is left", []karpv1.NodeSelectorRequirementWithMinValues{{Key: "karpenter.k8s.aws/instance-cpu", Operator: corev1.NodeSelectorOpGt, Values: []string{"3"}}},
			cpuLimit, corev1.ResourceList{corev1.ResourceCPU: q("16")}, nil, false},
		{"aws instance-memory (MiB) above what is left", []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement("karpenter.k8s.aws/instance-memory", "8192", "4096")},
			corev1.ResourceList{corev1.ResourceMemory: q("64Gi")}, corev1.ResourceList{corev1.ResourceMemory: q("61Gi")}, nil, true},
		{"kwok instance-cpu above what is left", []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement("karpenter.kwok.sh/instance-cpu", "4", "2")},
			cpuLimit, corev1.ResourceList{corev1.ResourceCPU: q("18500m")}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np := nodePool("spot", metav1.ConditionTrue, func(np *karpv1.NodePool) {
				np.Spec.Template.Spec.Requirements = tc.reqs
				np.Spec.Limits = karpv1.Limits(tc.limits)
				np.Status.Resources = tc.used
			})
			objs := []client.Object{np}
			for _, nc := range tc.claims {
				objs = append(objs, nc)
			}
			f := newFixture(t, Options{}, nil, nil, objs...)
			if _, got := f.ctrl.limitsHold(t.Context(), np); got != tc.want {
				t.Errorf("backed %v, want %v", got, tc.want)
			}
		})
	}
	// A node that reports its pods' requests as its capacity (kwok) is
	// measured by what it can give pods.
	t.Run("allocatable above capacity", func(t *testing.T) {
		np := nodePool("spot", metav1.ConditionTrue, func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement(corev1.LabelInstanceTypeStable, "c-2x")}
			np.Spec.Limits = karpv1.Limits(corev1.ResourceList{corev1.ResourceCPU: q("3")})
			np.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: q("1500m")}
		})
		nc := typedClaim("spot-a", "spot", "c-2x", corev1.ResourceList{corev1.ResourceCPU: q("1500m")})
		nc.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: q("1900m")}
		f := newFixture(t, Options{}, nil, nil, np, nc)
		if _, backed := f.ctrl.limitsHold(t.Context(), np); !backed {
			t.Error("1500m left of a pool whose only type gives pods 1900m: not backed")
		}
	})
}
