package placement_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/test"
)

// through makes the fixture's controller write through funcs (conflicts,
// refusals, failures), reading a pod again from the fake API server.
func (f *fixture) through(funcs interceptor.Funcs) {
	c := interceptor.NewClient(f.client.(client.WithWatch), funcs)
	f.ctrl = placement.NewController(f.clock, c, f.recorder, &capacity.NodePoolCapacity{Reader: c}, f.tally, 30*time.Second).WithAPIReader(f.client)
}

// userFields gives the pod what a user's template may hold, all of which a
// decision reads or edits on its copy: a nodeSelector, two required terms,
// a preferred one, a toleration, a gate of another controller before
// apportion's, its own annotations, a decision annotation a client wrote and
// a deletion cost (kept apart from the shared annotations in the cache).
func userFields(p *corev1.Pod) {
	zone := func(z string) []corev1.NodeSelectorRequirement {
		return []corev1.NodeSelectorRequirement{in(corev1.LabelTopologyZone, z)}
	}
	p.Spec.NodeSelector = map[string]string{corev1.LabelOSStable: "linux"}
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: zone("a")}, {MatchExpressions: zone("b")}}},
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: corev1.NodeSelectorTerm{MatchExpressions: zone("a")}}},
	}}
	p.Spec.Tolerations = []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpEqual, Value: "web", Effect: corev1.TaintEffectNoSchedule}}
	p.Spec.SchedulingGates = append([]corev1.PodSchedulingGate{{Name: "example.com/quota"}}, p.Spec.SchedulingGates...)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations["example.com/owner"] = "team-web"
	p.Annotations[annotations.Fallback] = "karpenter.sh/capacity-type=spot"
	p.Annotations[corev1.PodDeletionCost] = "7"
}

// withRoom gives s two more elements of capacity, filled with spare: an
// append to the pod's own slice writes there, where the slice's length
// does not show it.
func withRoom[T any](s []T, spare T) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(s), len(s)+2)
	copy(out, s)
	tail := out[len(s):cap(out)]
	for i := range tail {
		tail[i] = spare
	}
	return out
}

// roomy gives every slice a decision appends to room to append in place.
func roomy(p *corev1.Pod) *corev1.Pod {
	p.Spec.Tolerations = withRoom(p.Spec.Tolerations, corev1.Toleration{Key: "spare"})
	p.Spec.SchedulingGates = withRoom(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "spare"})
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		na := a.NodeAffinity
		na.PreferredDuringSchedulingIgnoredDuringExecution = withRoom(na.PreferredDuringSchedulingIgnoredDuringExecution, corev1.PreferredSchedulingTerm{Weight: -1})
		if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			r.NodeSelectorTerms = withRoom(r.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "spare"}}})
			for i := range r.NodeSelectorTerms {
				r.NodeSelectorTerms[i].MatchExpressions = withRoom(r.NodeSelectorTerms[i].MatchExpressions, corev1.NodeSelectorRequirement{Key: "spare"})
			}
		}
	}
	return p
}

// past is a copy of what lies past the end of s, in its capacity.
func past[T any](s []T) []T { return slices.Clone(s[len(s):cap(s)]) }

// room is what lies past the end of the pod's slices (roomy's spare
// elements).
func room(p *corev1.Pod) []any {
	out := []any{past(p.Spec.Tolerations), past(p.Spec.SchedulingGates)}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		out = append(out, past(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution))
		if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			out = append(out, past(r.NodeSelectorTerms))
			for _, term := range r.NodeSelectorTerms {
				out = append(out, past(term.MatchExpressions))
			}
		}
	}
	return out
}

// outcome is what a reconcile left on the stored pod.
type outcome string

const (
	placed     outcome = "placed"      // a decision written, the gate removed
	released   outcome = "released"    // the gate removed alone
	beyondCaps outcome = "beyond caps" // the gate removed, the pod marked beyond caps
	shadowed   outcome = "shadowed"    // a shadow decision written
	untouched  outcome = "untouched"   // nothing written
)

// outcome reads the pod as the API server holds it after a reconcile of
// created.
func (f *fixture) outcome(t *testing.T, created *corev1.Pod) outcome {
	t.Helper()
	var stored corev1.Pod
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(created), &stored); err != nil {
		t.Fatal(err)
	}
	switch {
	case stored.ResourceVersion == created.ResourceVersion:
		return untouched
	case stored.Annotations[annotations.Shadow] != "":
		return shadowed
	case decision.HasGate(&stored):
		return outcome(fmt.Sprintf("changed but still gated: %v", stored.Annotations))
	case decision.ReleasedBeyondCaps(&stored):
		return beyondCaps
	case stored.Annotations[annotations.Decision] != "":
		return placed
	}
	return released
}

// TestReconcileLeavesItsPodUnchanged: Reconcile reads the pod the informer
// caches, shared with every other reader, and must never change it: in
// every branch, the pod (a view of the compact cached pod, as the manager
// hands it) is the same after Reconcile as before, down to what lies past
// the end of its slices, where an append in place would write.
func TestReconcileLeavesItsPodUnchanged(t *testing.T) {
	bySeed := map[string]string{annotations.Strategy: seed004}
	shadowSeed := map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow}
	withPools := func(t *testing.T, ann map[string]string, objs ...client.Object) *fixture {
		return newFixture(t, ann, append(objs, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))...)
	}
	optedIn := func() *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{annotations.Architectures: "auto"}}}
	}
	bare := func(p *corev1.Pod) { p.OwnerReferences = nil }
	orphan := func(age time.Duration) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "nginx-gone", "rs-gone"
			p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		}
	}
	// onPools: the workload annotated ann, both NodePools, and its first
	// pod with edits then userFields.
	onPools := func(ann map[string]string, edits ...func(*corev1.Pod)) func(*testing.T) (*fixture, *corev1.Pod) {
		return func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, ann)
			return f, f.gatedPod(t, 0, append(edits, userFields)...)
		}
	}
	internal := apierrors.NewInternalError(errors.New("etcd is having a bad day"))
	for i, tc := range []struct {
		name    string
		setup   func(t *testing.T) (*fixture, *corev1.Pod)
		want    outcome
		requeue bool // looked at again after a while
		fails   bool // an error for the workqueue's backoff
	}{{
		name:  "by strategy",
		setup: onPools(bySeed),
		want:  placed,
	}, {
		name:  "by strategy, preferred mode",
		setup: onPools(map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModePreferred}),
		want:  placed,
	}, {
		name: "by strategy, a Job's pod",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "etl", UID: "job1", Annotations: bySeed}}
			f := withPools(t, nil, job)
			return f, f.gatedPod(t, 0, userFields, func(p *corev1.Pod) { p.OwnerReferences = test.OwnedBy("batch/v1", "Job", "etl", "job1") })
		},
		want: placed,
	}, {
		name: "by strategy, the images' architecture",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := newFixture(t, bySeed, test.Objects(archPools()...)...)
			f.ctrl.WithImages(&fakeImages{res: result("example.com/app:1", "arm64")}, time.Second)
			return f, f.gatedPod(t, 0, userFields)
		},
		want: placed,
	}, {
		name: "by strategy, the images could not be inspected",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := newFixture(t, bySeed, test.Objects(archPools()...)...)
			f.ctrl.WithImages(&fakeImages{err: errors.New("example.com/app:1: connection refused")}, time.Second)
			return f, f.gatedPod(t, 0, userFields)
		},
		want: placed,
	}, {
		name: "by strategy, a group the images cannot run on left out",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := newFixture(t, map[string]string{annotations.Strategy: "kubernetes.io/arch=arm64,weight=1:kubernetes.io/arch=amd64,weight=1"}, test.Objects(archPools()...)...)
			f.ctrl.WithImages(&fakeImages{res: result("example.com/amd64only:1", "amd64")}, time.Second)
			return f, f.gatedPod(t, 0, userFields)
		},
		want: placed,
	}, {
		name: "by strategy, architecture rules",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := nodeLabelFixture(t, map[string]string{annotations.Strategy: "kubernetes.io/arch=arm64,weight=1:kubernetes.io/arch=amd64,weight=1"})
			return f, f.gatedPod(t, 0, userFields)
		},
		want: placed,
	}, {
		name: "by architecture only, with rules",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := nodeLabelFixture(t, nil)
			return f, f.gatedPod(t, 0, userFields)
		},
		want: placed,
	}, {
		name: "by architecture only, a pod without a workload",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := nodeLabelFixture(t, nil)
			return f, f.gatedPod(t, 0, userFields, bare)
		},
		want: placed,
	}, {
		name: "fallback, a group out of capacity",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			tracker := capacity.NewTracker(f.clock, time.Minute, 10*time.Minute)
			f.ctrl = placement.NewController(f.clock, f.client, f.recorder, &capacity.NodePoolCapacity{Reader: f.client, Tracker: tracker}, f.tally, 30*time.Second)
			tracker.Mark(capacity.PoolKey("spot"), "limits")
			return f, f.gatedPod(t, 0, userFields)
		},
		want: placed,
	}, {
		name: "beyond caps",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, map[string]string{annotations.Strategy: onDemandKey + ",weight=1,max=1:karpenter.sh/capacity-type=spot,weight=1,max=1"})
			for i := range 2 {
				f.reconcile(t, f.gatedPod(t, i))
			}
			return f, f.gatedPod(t, 2, userFields)
		},
		want: beyondCaps,
	}, {
		name:  "shadow, ungated",
		setup: onPools(shadowSeed, ungated),
		want:  shadowed,
	}, {
		name:  "shadow, gated",
		setup: onPools(shadowSeed),
		want:  shadowed,
	}, {
		name: "shadow, the images read from the API server",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, shadowSeed)
			f.ctrl.WithImages(&fakeImages{res: result("example.com/app:1", "amd64")}, time.Second).WithAPIReader(f.client)
			return f, f.gatedPod(t, 0, ungated, userFields)
		},
		want: shadowed,
	}, {
		name: "shadow, by architecture only",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := newFixture(t, map[string]string{annotations.Mode: annotations.ModeShadow}, append(test.Objects(archPools()...), optedIn())...)
			f.ctrl.WithImages(&fakeImages{res: result("example.com/arm64only:1", "arm64")}, time.Second)
			return f, f.gatedPod(t, 0, ungated, userFields)
		},
		want: shadowed,
	}, {
		name: "shadow, no group served",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := newFixture(t, shadowSeed)
			return f, f.gatedPod(t, 0, ungated, userFields)
		},
		want: untouched,
	}, {
		name: "shadow, an excluded namespace",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, shadowSeed)
			f.ctrl.WithExcludedNamespaces([]string{"web"}, false)
			return f, f.gatedPod(t, 0, ungated, userFields)
		},
		want: untouched,
	}, {
		name:  "released, no strategy",
		setup: onPools(nil),
		want:  released,
	}, {
		name:  "released, invalid strategy",
		setup: onPools(map[string]string{annotations.Strategy: "a=b,weight=x"}),
		want:  released,
	}, {
		name:  "released, opted out",
		setup: onPools(map[string]string{annotations.Strategy: seed004, annotations.Skip: "true"}),
		want:  released,
	}, {
		name:  "released, no workload",
		setup: onPools(nil, bare),
		want:  released,
	}, {
		name: "released, no group served",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := newFixture(t, map[string]string{annotations.Strategy: onDemandKey + ",weight=1"}, nodePool("spot", 5, "spot"))
			return f, f.gatedPod(t, 0, userFields)
		},
		want: released,
	}, {
		name: "released, no group runs the images' architecture",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := newFixture(t, map[string]string{annotations.Strategy: "kubernetes.io/arch=arm64,weight=1"}, test.Objects(archPools()...)...)
			f.ctrl.WithImages(&fakeImages{res: result("example.com/amd64only:1", "amd64")}, time.Second)
			return f, f.gatedPod(t, 0, userFields)
		},
		want: released,
	}, {
		name: "released, the images share no architecture",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := newFixture(t, bySeed, test.Objects(archPools()...)...)
			f.ctrl.WithImages(&fakeImages{res: result("example.com/windows:1")}, time.Second)
			return f, f.gatedPod(t, 0, userFields)
		},
		want: released,
	}, {
		name: "released, architecture only, the images could not be inspected",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := nodeLabelFixture(t, nil)
			f.ctrl.WithImages(&fakeImages{err: errors.New("timeout")}, time.Second)
			return f, f.gatedPod(t, 0, userFields)
		},
		want: released,
	}, {
		name: "released, workload not cached past the wait",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			return f, f.gatedPod(t, 0, userFields, orphan(time.Hour))
		},
		want: released,
	}, {
		name: "workload not cached yet",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			return f, f.gatedPod(t, 0, userFields, orphan(0))
		},
		want: untouched, requeue: true,
	}, {
		name: "write conflict, the decision sent again",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			f.through(conflictOnce(nil))
			return f, f.gatedPod(t, 0, userFields)
		},
		want: placed,
	}, {
		name: "write conflict, the pod released meanwhile",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			f.through(conflictOnce(releasedMeanwhile(t)))
			return f, f.gatedPod(t, 0, userFields)
		},
		want: released, requeue: true,
	}, {
		name: "release conflict",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, nil)
			f.through(conflictOnce(nil))
			return f, f.gatedPod(t, 0, userFields)
		},
		want: untouched, requeue: true,
	}, {
		name: "refused by an admission policy",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			var sent atomic.Int32
			f.through(refusing(&sent, test.PolicyDenial("nginx-abc-000", "no-affinity-changes", "no-affinity-changes-web", "spec.affinity is immutable"), changesAffinity))
			return f, f.gatedPod(t, 0, userFields)
		},
		want: released,
	}, {
		name: "decision and release refused",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			var sent atomic.Int32
			f.through(refusing(&sent, test.PolicyDenial("nginx-abc-000", "no-pod-updates", "no-pod-updates-web", "pods are immutable"), func([]byte) bool { return true }))
			return f, f.gatedPod(t, 0, userFields)
		},
		want: untouched,
	}, {
		name: "shadow decision refused",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, shadowSeed)
			var sent atomic.Int32
			f.through(refusing(&sent, test.WebhookDenial("validation.gatekeeper.sh", 403, "[no-new-annotations] annotations are immutable"), func([]byte) bool { return true }))
			return f, f.gatedPod(t, 0, ungated, userFields)
		},
		want: untouched,
	}, {
		name: "API error",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			f.through(test.FailPatches(1, internal))
			return f, f.gatedPod(t, 0, userFields)
		},
		want: untouched, fails: true,
	}, {
		name: "not leading",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			var f *fixture
			f, _ = leaseFixture(t, self, bySeed, func() time.Time { return f.clock.Now().Add(-leaseDuration - time.Second) })
			return f, f.gatedPod(t, 0, userFields)
		},
		want: untouched, requeue: true,
	}, {
		name: "not leading, shadow",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			var f *fixture
			f, _ = leaseFixture(t, self, shadowSeed, func() time.Time { return f.clock.Now().Add(-leaseDuration - time.Second) })
			return f, f.gatedPod(t, 0, ungated, userFields)
		},
		want: untouched, requeue: true,
	}, {
		name: "the Lease goes stale before the patch",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			var f *fixture
			calls := 0
			f, _ = leaseFixture(t, self, bySeed, func() time.Time {
				if calls++; calls == 1 {
					return f.clock.Now()
				}
				return f.clock.Now().Add(-leaseDuration)
			})
			return f, f.gatedPod(t, 0, userFields)
		},
		want: untouched, requeue: true,
	}, {
		name: "terminating",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			pod := f.gatedPod(t, 0, userFields)
			pod.DeletionTimestamp = &metav1.Time{Time: now}
			return f, pod
		},
		want: untouched,
	}, {
		name: "decided, the cache not caught up",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			pod := f.gatedPod(t, 0, userFields)
			f.tally.Record(pod.UID, placement.Revision("web", "rs-uid"), onDemandKey, now)
			return f, pod
		},
		want: untouched,
	}, {
		name: "the pods not listed yet",
		setup: func(t *testing.T) (*fixture, *corev1.Pod) {
			f := withPools(t, bySeed)
			f.tally.SetSynced(func() bool { return false })
			return f, f.gatedPod(t, 0, userFields)
		},
		want: untouched, requeue: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f, created := tc.setup(t)
			in := roomy(created.DeepCopy())
			// A shape of its own: a pod changed by one case would
			// otherwise change the next case's pods.
			in.Labels = maps.Clone(in.Labels)
			in.Labels["test.apportion.dev/case"] = strconv.Itoa(i)
			cached := podcache.Compact(in)
			pod, _ := podcache.View(cached)
			want, wantCached, wantRoom := pod.DeepCopy(), cached.DeepCopyObject(), room(pod)

			res, err := f.ctrl.Reconcile(context.Background(), pod)

			if !reflect.DeepEqual(pod.ObjectMeta, want.ObjectMeta) {
				t.Errorf("Reconcile changed the pod's metadata:\n%+v\nwant\n%+v", pod.ObjectMeta, want.ObjectMeta)
			}
			if !reflect.DeepEqual(pod.Spec, want.Spec) {
				t.Errorf("Reconcile changed the pod's spec:\n%+v\nwant\n%+v", pod.Spec, want.Spec)
			}
			if !reflect.DeepEqual(pod.Status, want.Status) {
				t.Errorf("Reconcile changed the pod's status:\n%+v\nwant\n%+v", pod.Status, want.Status)
			}
			if !reflect.DeepEqual(cached.DeepCopyObject(), wantCached) {
				t.Errorf("Reconcile changed the cached pod:\n%+v\nwant\n%+v", cached.DeepCopyObject(), wantCached)
			}
			if got := room(pod); !reflect.DeepEqual(got, wantRoom) {
				t.Errorf("Reconcile appended to the pod's own slices: past their ends\n%+v\nwant\n%+v", got, wantRoom)
			}

			// The scenario reached the branch it names.
			if got := f.outcome(t, created); got != tc.want {
				t.Errorf("pod %s, want %s", got, tc.want)
			}
			if (res.RequeueAfter > 0) != tc.requeue || (err != nil) != tc.fails {
				t.Errorf("Reconcile = %+v, %v; want requeued %v, failed %v", res, err, tc.requeue, tc.fails)
			}
		})
	}
}

// handed records the pod it is given.
type handed struct{ pod *corev1.Pod }

func (h *handed) Reconcile(_ context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	h.pod = pod
	return reconcile.Result{}, nil
}

// TestViewReconcilerHandsTheCachedPod: the pod of a request is read from
// the store and handed over without a copy (it shares the cached pod's
// maps), and the controller decides it from there, leaving the cached pod
// as it was; a pod not in the store is nothing to do.
func TestViewReconcilerHandsTheCachedPod(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	created := f.gatedPod(t, 0, userFields)
	cached := podcache.Compact(created.DeepCopy())
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	if err := store.Add(cached); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(created)}

	var h handed
	if _, err := placement.ViewReconciler(store, &h).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if h.pod == nil || h.pod.UID != created.UID {
		t.Fatalf("handed %v, want pod %s", h.pod, created.UID)
	}
	if reflect.ValueOf(h.pod.Labels).Pointer() != reflect.ValueOf(cached.Labels).Pointer() {
		t.Error("the pod handed over is a copy, not the cached pod's view")
	}

	want := cached.DeepCopyObject()
	if _, err := placement.ViewReconciler(store, f.ctrl).Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := f.outcome(t, created); got != placed {
		t.Errorf("pod %s, want placed", got)
	}
	if !reflect.DeepEqual(cached.DeepCopyObject(), want) {
		t.Errorf("the cached pod changed:\n%+v\nwant\n%+v", cached.DeepCopyObject(), want)
	}

	h.pod = nil
	gone := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: "gone"}}
	if res, err := placement.ViewReconciler(store, &h).Reconcile(ctx, gone); err != nil || res != (reconcile.Result{}) || h.pod != nil {
		t.Errorf("a pod not in the store: Reconcile = %+v, %v, handed %v; want nothing done", res, err, h.pod)
	}
}
