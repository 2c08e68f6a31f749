package fallback

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/test"
)

// limitOf is a spot pool's limit and usage of one resource, with room left
// for a node as far as anything known says (its smallest instance type is
// unknown), and that limit raised.
type limitOf struct {
	name         corev1.ResourceName
	limit, used  string
	raised, less string
}

var limitsByResource = []limitOf{
	{corev1.ResourceCPU, "100", "92", "200", "100"},
	{corev1.ResourceMemory, "64Gi", "60Gi", "128Gi", "64Gi"},
	{"nodes", "5", "3", "10", "5"},
}

func (l limitOf) pool() *karpv1.NodePool {
	q := resource.MustParse
	return nodePool("spot", metav1.ConditionTrue, func(np *karpv1.NodePool) {
		np.Spec.Limits = karpv1.Limits(corev1.ResourceList{l.name: q(l.limit)})
		np.Status.Resources = corev1.ResourceList{l.name: q(l.used)}
	})
}

func (l limitOf) set(v string) func(*karpv1.NodePool) {
	return func(np *karpv1.NodePool) { np.Spec.Limits[l.name] = resource.MustParse(v) }
}

// TestScopedLimitsMarkLiftedWhenLimitRaised: Karpenter's limits finding on a
// tenant's pod, which the pool's state does not back (room left, its
// smallest instance type unknown), marks the pool out for the tenant's
// workload only. A change that gives no room (the limit lowered) keeps it
// out; the limit raised ends it at once, for cpu, memory and nodes alike,
// so the workload's next pods go there again.
//
// (The workload's mark used to stay until its TTL: its scale-up after the
// limit was raised went to its other groups.)
func TestScopedLimitsMarkLiftedWhenLimitRaised(t *testing.T) {
	for _, l := range limitsByResource {
		t.Run(string(l.name), func(t *testing.T) {
			q := resource.MustParse
			objs := append(tenantWorkload("small", nil), l.pool(),
				pendingPod("p1", "spot", now.Add(-time.Minute)),
				pendingPod("tiny", "spot", now.Add(-time.Minute), inTenant("small"), withRequests(corev1.ResourceList{corev1.ResourceCPU: q("1")})))
			f := newFixture(t, Options{}, nil, nil, objs...)
			checkLimitsScopedToTenant(t, f, "tiny", "small")
			key := capacity.Scoped("small-deploy-uid", capacity.PoolKey("spot"))

			f.updatePool(l.set(l.less))
			f.reconcilePool()
			if out, _ := f.out(key); !out {
				t.Fatal("limit lowered: the workload's mark ended, want it kept")
			}
			before := rechecks(ReasonLimits, RecheckLifted)
			f.updatePool(l.set(l.raised))
			f.reconcilePool()
			if out, _ := f.out(key); out {
				t.Fatalf("limit raised: still out until %v, want lifted", f.until(key))
			}
			if got := rechecks(ReasonLimits, RecheckLifted) - before; got != 1 {
				t.Errorf("rechecks_total{limits,lifted} grew by %v, want 1", got)
			}
		})
	}
}

// TestWideLimitsMarkLiftedPerResource: a NodePool out for every workload on
// a memory or nodes limit used up is back at once when that limit is
// raised, and kept out while it is not (cpu: TestLimitsOutageLifted).
func TestWideLimitsMarkLiftedPerResource(t *testing.T) {
	for _, l := range limitsByResource[1:] {
		t.Run(string(l.name), func(t *testing.T) {
			np := l.pool()
			np.Status.Resources[l.name] = resource.MustParse(l.limit)
			f := newFixture(t, Options{}, nil, nil, np)
			spot := capacity.PoolKey("spot")
			if _, backed := f.ctrl.limitsHold(t.Context(), np); !backed {
				t.Fatalf("%s used up: not backed", l.name)
			}
			f.tracker.Mark(spot, ReasonLimits)
			f.ctrl.recordOutage(t.Context(), spot, signal{reason: ReasonLimits, wide: true, np: np})
			f.updatePool(func(np *karpv1.NodePool) { np.Labels = map[string]string{"team": "a"} })
			f.reconcilePool()
			if out, _ := f.out(spot); !out {
				t.Fatal("nothing changed that gives room: lifted, want kept")
			}
			f.updatePool(l.set(l.raised))
			f.reconcilePool()
			if out, _ := f.out(spot); out {
				t.Fatalf("limit raised: still out until %v", f.until(spot))
			}
		})
	}
}

// TestScopedMarksLiftedByReason: a workload's mark of a NodePool ends when
// the pool changes so that what the workload's pods showed no longer
// stands: any reason when its template (requirements, labels, taints,
// NodeClass) changes; limits, no_nodeclaim and timeout also when a limit is
// raised or usage is lower; no_offering (the cloud's offerings) not on more
// room. A change of its metadata, or a limit lowered, ends none; another
// pool's marks and other workloads' marks of other pools stay.
func TestScopedMarksLiftedByReason(t *testing.T) {
	q := resource.MustParse
	changes := map[string]func(*karpv1.NodePool){
		"requirements changed": func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, test.Requirement(corev1.LabelTopologyZone, "zone-a", "zone-b"))
		},
		"limit raised":   func(np *karpv1.NodePool) { np.Spec.Limits[corev1.ResourceCPU] = q("200") },
		"usage lower":    func(np *karpv1.NodePool) { np.Status.Resources[corev1.ResourceCPU] = q("50") },
		"labels changed": func(np *karpv1.NodePool) { np.Labels = map[string]string{"team": "a"} },
		"limit lowered":  func(np *karpv1.NodePool) { np.Spec.Limits[corev1.ResourceCPU] = q("99") },
	}
	lifts := map[string]map[string]bool{
		ReasonLimits:      {"requirements changed": true, "limit raised": true, "usage lower": true},
		ReasonNoNodeClaim: {"requirements changed": true, "limit raised": true, "usage lower": true},
		ReasonTimeout:     {"requirements changed": true, "limit raised": true, "usage lower": true},
		ReasonNoOffering:  {"requirements changed": true},
	}
	for reason, lifted := range lifts {
		for change, mutate := range changes {
			t.Run(reason+"/"+change, func(t *testing.T) {
				f := newFixture(t, Options{}, nil, nil, limitsByResource[0].pool(), nodePool("on-demand", metav1.ConditionTrue))
				key := capacity.Scoped("w1", capacity.PoolKey("spot"))
				other := capacity.Scoped("w2", capacity.PoolKey("on-demand"))
				for _, k := range []capacity.Key{key, other} {
					f.tracker.Mark(k, reason)
					// The NodePool as the cache has it (the signal carries none).
					f.ctrl.recordOutage(t.Context(), k, signal{reason: reason})
				}
				f.updatePool(mutate)
				f.reconcilePool()
				if out, _ := f.out(key); out == lifted[change] {
					t.Errorf("out %v, want lifted %v", out, lifted[change])
				}
				if out, _ := f.out(other); !out {
					t.Error("another pool's mark for another workload ended")
				}
			})
		}
	}
}
