package fallback

import (
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/test"
)

// spotType is the one instance type the spot pools of the tests that
// launch nodes allow (allowing), the type of launchedClaim.
const spotType = "c-spot"

// allowing makes a NodePool's requirements name its instance types.
func allowing(types ...string) func(*karpv1.NodePool) {
	return func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, test.Requirement(corev1.LabelInstanceTypeStable, types...))
	}
}

// typedClaim is a NodeClaim of pool that launched a node of instance type
// it (architecture amd64, linux) with capacity.
func typedClaim(name, pool, it string, capacity corev1.ResourceList) *karpv1.NodeClaim {
	nc := nodeClaim(name, pool, now.Add(-time.Hour),
		status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue},
		status.Condition{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue},
		status.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue})
	nc.Labels[corev1.LabelInstanceTypeStable] = it
	nc.Labels[corev1.LabelArchStable] = "amd64"
	nc.Labels[corev1.LabelOSStable] = "linux"
	nc.Status.Capacity = capacity
	return nc
}

// armClaim is typedClaim for an arm64 instance type of the on-demand pool.
func armClaim(name, it string, capacity corev1.ResourceList) *karpv1.NodeClaim {
	nc := typedClaim(name, "on-demand", it, capacity)
	nc.Labels[corev1.LabelArchStable] = "arm64"
	return nc
}

// noTypesPool is spot requiring amd64 and naming one instance type, a-1x,
// that the cluster runs as arm64 (noTypesClaim): its requirements leave no
// instance type, and the cluster's state shows it.
func noTypesPool() *karpv1.NodePool {
	return nodePool("spot", metav1.ConditionTrue, allowing("a-1x"), func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, test.Requirement(corev1.LabelArchStable, "amd64"))
	})
}

// noTypesClaim is the on-demand pool's node of a-1x, arm64.
func noTypesClaim() *karpv1.NodeClaim { return armClaim("od-a", "a-1x", cpus(1)) }

// cpus is a node of n cpu and 4Gi per cpu.
func cpus(n int64) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(n, resource.DecimalSI), corev1.ResourceMemory: *resource.NewQuantity(n*4<<30, resource.BinarySI)}
}

// roomyPool is spot with 8 of its 100 cpu left, which has launched only
// 16-cpu nodes; its requirements name no instance type, so smaller ones
// (Karpenter's catalog has 1-cpu types) may still launch.
func roomyPool(mutate ...func(*karpv1.NodePool)) *karpv1.NodePool {
	q := resource.MustParse
	return nodePool("spot", metav1.ConditionTrue, append([]func(*karpv1.NodePool){func(np *karpv1.NodePool) {
		np.Spec.Limits = karpv1.Limits(corev1.ResourceList{corev1.ResourceCPU: q("100")})
		np.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: q("92")}
	}}, mutate...)...)
}

// TestLimitsNeedRoomBelowEveryAllowedType: spot has 8 cpu left and has
// launched only 16-cpu nodes, but its requirements allow any instance type:
// 8 cpu is room for a smaller node. A tenant's forged limits Event on its
// own 1-cpu pod moves the tenant's workload only (after Grace); another
// namespace's pod of the pool is neither marked out nor deleted.
//
// (The remainder used to be compared with the smallest node the pool had
// launched: spot was out for every workload and web/p1 deleted.)
func TestLimitsNeedRoomBelowEveryAllowedType(t *testing.T) {
	q := resource.MustParse
	objs := append(tenantWorkload("small", nil), roomyPool(), typedClaim("spot-a", "spot", "c-16x", cpus(16)),
		pendingPod("p1", "spot", now.Add(-time.Minute)),
		pendingPod("tiny", "spot", now.Add(-time.Minute), inTenant("small"), withRequests(corev1.ResourceList{corev1.ResourceCPU: q("1")})))
	checkLimitsScopedToTenant(t, newFixture(t, Options{}, nil, nil, objs...), "tiny", "small")
}

// TestLimitsOutageRecheckAsksTheSameQuestion: a limits outage of spot whose
// limits and usage have not changed since, with 8 cpu left and only 16-cpu
// nodes launched, is lifted at its recheck: its requirements allow smaller
// instance types, so its state does not hold it out.
//
// (The recheck used to compare the remainder with the smallest node launched
// and kept the pool out, period after period.)
func TestLimitsOutageRecheckAsksTheSameQuestion(t *testing.T) {
	spot := capacity.PoolKey("spot")
	np := roomyPool()
	f := newFixture(t, Options{}, nil, nil, np, typedClaim("spot-a", "spot", "c-16x", cpus(16)))
	f.tracker.Mark(spot, ReasonLimits)
	f.ctrl.recordOutage(t.Context(), spot, signal{reason: ReasonLimits, wide: true, np: np})
	f.reconcilePool()
	if out, _ := f.out(spot); out {
		t.Fatalf("still out until %v: the recheck held the pool out on room for a smaller node", f.until(spot))
	}
}

// TestNoTypesEventNeedsTheState: a Karpenter-looking NoCompatibleInstanceTypes
// about spot, in the namespace Karpenter writes those to, while spot's
// requirements allow instance types (one of them runs in the cluster), marks
// nothing and deletes nothing; nor does one that names no NodePool UID.
//
// (Either used to mark spot out for every workload: the namespace and the
// UID were the only checks.)
func TestNoTypesEventNeedsTheState(t *testing.T) {
	for name, mutate := range map[string]func(*corev1.Event){
		"with the pool's UID": func(*corev1.Event) {},
		"without a UID":       func(ev *corev1.Event) { ev.InvolvedObject.UID = "" },
	} {
		t.Run(name, func(t *testing.T) {
			np := nodePool("spot", metav1.ConditionTrue, func(np *karpv1.NodePool) {
				np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
					{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"c-2x", "c-4x"}},
				}
			})
			f := newFixture(t, Options{}, nil, nil, np, typedClaim("od-a", "on-demand", "c-2x", cpus(2)),
				pendingPod("p1", "spot", now.Add(-5*time.Second)))
			ev := noTypesEvent(PoolEventNamespace, np, now)
			mutate(ev)
			f.ctrl.ObserveEvent(ev)
			checkVictimUntouched(t, f)
		})
	}
}

// TestNoTypesHold: a NodePool's state says its requirements leave no
// instance type when they leave no value of a label every instance type
// has, or name their types and each is one the cluster launched with labels
// they rule out; anything unknown is no proof.
func TestNoTypesHold(t *testing.T) {
	arm := noTypesClaim() // a-1x, arm64
	big := typedClaim("od-c", "on-demand", "c-4x", cpus(4))
	big.Labels["karpenter.k8s.aws/instance-cpu"] = "4"
	big.Labels[karpv1.CapacityTypeLabelKey] = karpv1.CapacityTypeOnDemand
	unlaunched := typedClaim("od-d", "on-demand", "a-2x", cpus(2))
	unlaunched.Labels[corev1.LabelArchStable] = "arm64"
	unlaunched.Status.Conditions = nil
	req := func(key string, op corev1.NodeSelectorOperator, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
		return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values}
	}
	amd64 := test.Requirement(corev1.LabelArchStable, "amd64")
	for _, tc := range []struct {
		name string
		reqs []karpv1.NodeSelectorRequirementWithMinValues
		want bool
	}{
		{"no requirements", nil, false},
		{"architectures that exclude each other", []karpv1.NodeSelectorRequirementWithMinValues{amd64, test.Requirement(corev1.LabelArchStable, "arm64")}, true},
		{"a capacity type in and not in", []karpv1.NodeSelectorRequirementWithMinValues{
			test.Requirement(karpv1.CapacityTypeLabelKey, "spot"), req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpNotIn, "spot")}, true},
		{"the named type of another architecture", []karpv1.NodeSelectorRequirementWithMinValues{amd64, test.Requirement(corev1.LabelInstanceTypeStable, "a-1x")}, true},
		{"one named type fits", []karpv1.NodeSelectorRequirementWithMinValues{amd64, test.Requirement(corev1.LabelInstanceTypeStable, "a-1x", "c-4x")}, false},
		{"a named type never launched", []karpv1.NodeSelectorRequirementWithMinValues{amd64, test.Requirement(corev1.LabelInstanceTypeStable, "a-1x", "z-1x")}, false},
		// Its labels before launch are the NodeClaim's requirements, not
		// what the instance turned out to be.
		{"a named type not launched yet", []karpv1.NodeSelectorRequirementWithMinValues{amd64, test.Requirement(corev1.LabelInstanceTypeStable, "a-2x")}, false},
		// The provider's labels are the type's own.
		{"the named type's cpu below the requirements'", []karpv1.NodeSelectorRequirementWithMinValues{
			test.Requirement(corev1.LabelInstanceTypeStable, "c-4x"), req("karpenter.k8s.aws/instance-cpu", corev1.NodeSelectorOpGt, "8")}, true},
		// Where it was launched is not all it can be.
		{"the named type launched on-demand, the pool spot", []karpv1.NodeSelectorRequirementWithMinValues{
			test.Requirement(corev1.LabelInstanceTypeStable, "c-4x"), test.Requirement(karpv1.CapacityTypeLabelKey, "spot")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np := nodePool("spot", metav1.ConditionTrue, func(np *karpv1.NodePool) { np.Spec.Template.Spec.Requirements = tc.reqs })
			f := newFixture(t, Options{}, nil, nil, np, arm.DeepCopy(), big.DeepCopy(), unlaunched.DeepCopy())
			if got := f.ctrl.noTypesHold(t.Context(), np); got != tc.want {
				t.Errorf("no types %v, want %v", got, tc.want)
			}
		})
	}
}
