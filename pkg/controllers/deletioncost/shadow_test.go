package deletioncost

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// TestShadowPodsCountOnceRequired: a workload ran n pods in shadow mode, all
// on nodes of one group, then left shadow mode and grew by m pods, which
// the placement controller decided from the running split (the shadow pods
// counted by their node) with their costs. The shadow pods then take costs
// by their node's group, one write each, and removing the lowest cost first
// (the ReplicaSet controller) keeps the split as close to quota at every
// size down to 1 as the pods allow. While the workload is in shadow mode
// (its own mode, or --default-mode), its shadow pods get no cost.
func TestShadowPodsCountOnceRequired(t *testing.T) {
	const od, spot = "karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"
	const seed004 = od + ",base=2,weight=1:" + spot + ",weight=3"
	s, err := compiled.Parse(seed004)
	if err != nil {
		t.Fatal(err)
	}
	m := s.Method
	for _, tc := range []struct {
		shadows, group int // shadow pods, on nodes of this group
		grown          int // pods after the scale-up
	}{
		{13, 1, 20}, // spot over its part: on-demand gets the new pods
		{13, 0, 20}, // on-demand over its part
		{6, 0, 30},
		{2, 1, 4},
		{9, 1, 10},
	} {
		t.Run(fmt.Sprintf("%d on %s, to %d", tc.shadows, s.Strategy.Groups[tc.group].Key(), tc.grown), func(t *testing.T) {
			for _, mode := range []string{"annotation", "default", annotations.ModeRequired} {
				deployAnn := map[string]string{annotations.Strategy: seed004}
				defaultMode := annotations.ModeRequired
				switch mode {
				case "annotation":
					deployAnn[annotations.Mode] = annotations.ModeShadow
				case "default":
					defaultMode = annotations.ModeShadow
				}
				deploy, rs := test.Workload(deployAnn)
				objs := []client.Object{deploy, rs, test.Node("od-1", map[string]string{"karpenter.sh/capacity-type": "on-demand"}),
					test.Node("spot-1", map[string]string{"karpenter.sh/capacity-type": "spot"})}
				nodes := []string{"od-1", "spot-1"}
				base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
				pod := func(i int) *corev1.Pod {
					name := fmt.Sprintf("nginx-abc-%03d", i)
					return test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID(name),
						CreationTimestamp: metav1.NewTime(base.Add(time.Duration(i) * time.Second)),
						Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"}}, Owner: rs})
				}
				// The shadow pods run where the scheduler put them; their
				// shadow decisions say where apportion would have.
				counts := make([]int64, 2) // by node: what the engine splits by
				var shadowPods []*corev1.Pod
				for i := range tc.shadows {
					p := shadowPod(pod(i), []string{od, spot}[m.Sequence(tc.shadows)[i]])
					p.Spec.NodeName = nodes[tc.group]
					counts[tc.group]++
					shadowPods = append(shadowPods, p)
					objs = append(objs, p)
				}
				// The new pods, decided from the running split, each with
				// the cost the placement controller writes: its group's
				// next rank, the shadow pods on its group's nodes counted.
				var placed []*corev1.Pod
				for i := tc.shadows; i < tc.grown; i++ {
					g := m.Next(counts, apportion.All)
					counts[g]++
					cost, ok := decision.GroupCost(m, g, counts[g])
					if !ok {
						t.Fatalf("no position for pod %d of group %d", counts[g], g)
					}
					p := pod(i)
					p.Spec.NodeName = nodes[g]
					key := s.Strategy.Groups[g].Key()
					p.Annotations = map[string]string{annotations.Group: key, annotations.Signature: testSigner.Sign(p.UID, key, ""), Annotation: strconv.Itoa(cost)}
					placed = append(placed, p)
					objs = append(objs, p)
				}
				patches := 0
				c := interceptor.NewClient(ownedPodsClient(objs...), interceptor.Funcs{
					Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
						patches++
						return c.Patch(ctx, o, p, opts...)
					},
				})
				ctrl := NewController(c, testSigner).WithDefaultMode(defaultMode)
				ctx := context.Background()
				// Right after the switch, the first pod placed with its cost
				// is worth a reconcile: nothing reconciled the revision yet.
				q := &recordingQueue{}
				gated := placed[0].DeepCopy()
				gated.Annotations = nil
				ctrl.EventHandler().Update(ctx, event.UpdateEvent{ObjectOld: gated, ObjectNew: placed[0]}, q)
				if reqs := q.take(); len(reqs) != 1 || reqs[0].Name != string(rs.UID) {
					t.Errorf("%s: the first pod placed after the switch enqueues %v, want its revision", mode, reqs)
				}
				req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(rs.UID)}}
				if _, err := ctrl.Reconcile(ctx, req); err != nil {
					t.Fatal(err)
				}
				costs := map[string]int{}
				left := map[string]int{} // pod -> group by node
				for _, p := range append(slices.Clone(shadowPods), placed...) {
					var got corev1.Pod
					if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
						t.Fatal(err)
					}
					v, ok := got.Annotations[Annotation]
					if mode != annotations.ModeRequired {
						if ok && got.Annotations[annotations.Shadow] != "" {
							t.Errorf("%s: shadow pod %s got cost %s while the workload is in shadow mode", mode, p.Name, v)
						}
						continue
					}
					n, err := strconv.Atoi(v)
					if !ok || err != nil {
						// The ReplicaSet controller takes it as 0.
						t.Errorf("pod %s: no cost (%q) once the workload is required", p.Name, v)
					}
					costs[p.Name] = n
					left[p.Name] = slices.Index(nodes, got.Spec.NodeName)
				}
				if mode != annotations.ModeRequired {
					continue // the decided pods' costs, told with the shadow pods counted, are rewritten without them
				}
				if patches != tc.shadows {
					t.Errorf("%d patches, want one per shadow pod (%d): the new pods' costs were right", patches, tc.shadows)
				}
				// Lowest cost first, as the ReplicaSet controller removes
				// them; no two alike, or the order is not apportion's.
				order := slices.SortedFunc(maps.Keys(costs), func(a, b string) int { return cmp.Or(costs[a]-costs[b], strings.Compare(a, b)) })
				for k := 1; k < len(order); k++ {
					if costs[order[k]] == costs[order[k-1]] {
						t.Errorf("pods %s and %s share cost %d", order[k-1], order[k], costs[order[k]])
					}
				}
				have := slices.Clone(counts)
				for _, name := range order[:len(order)-1] {
					have[left[name]]--
					if off, best := offQuota(m, have), closest(m, have[0]+have[1], []int64{0, 0}, counts); off > best {
						t.Errorf("after removing %s: split %v is %d off quota at %d pods, %d is possible (from %v)", name, have, off, have[0]+have[1], best, counts)
					}
				}
				// Nothing to write again.
				patches = 0
				if _, err := ctrl.Reconcile(ctx, req); err != nil {
					t.Fatal(err)
				}
				if patches != 0 {
					t.Errorf("a second reconcile wrote %d costs", patches)
				}
				// From now on a shadow pod's status changes nothing, its
				// leaving does, and a pod placed with its cost does not.
				var sh corev1.Pod
				if err := c.Get(ctx, client.ObjectKeyFromObject(shadowPods[0]), &sh); err != nil {
					t.Fatal(err)
				}
				ready := sh.DeepCopy()
				ready.Status.Phase = corev1.PodRunning
				terminating := ready.DeepCopy()
				terminating.DeletionTimestamp = &metav1.Time{Time: base}
				h := ctrl.EventHandler()
				h.Update(ctx, event.UpdateEvent{ObjectOld: &sh, ObjectNew: ready}, q)
				h.Update(ctx, event.UpdateEvent{ObjectOld: gated, ObjectNew: placed[len(placed)-1]}, q)
				if reqs := q.take(); len(reqs) != 0 {
					t.Errorf("a shadow pod running, a pod placed with its cost: enqueued %v", reqs)
				}
				h.Update(ctx, event.UpdateEvent{ObjectOld: ready, ObjectNew: terminating}, q)
				if reqs := q.take(); len(reqs) != 1 {
					t.Errorf("a shadow pod terminating: enqueued %v, want its revision", reqs)
				}
			}
		})
	}
}
