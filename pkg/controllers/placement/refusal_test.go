package placement_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/test"
)

// refusing is a policy that refuses, with err, every pod patch for which
// refuse holds; it counts the patches sent.
func refusing(sent *atomic.Int32, err error, refuse func(patch []byte) bool) interceptor.Funcs {
	return interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			sent.Add(1)
			data, derr := patch.Data(obj)
			if derr != nil {
				return derr
			}
			if refuse(data) {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}
}

// changesAffinity: the policy of restrictive Kyverno or Gatekeeper setups,
// no change of a pod's affinity after its creation.
func changesAffinity(patch []byte) bool { return strings.Contains(string(patch), `"affinity"`) }

// TestRefusedPlacementReleasesUnchanged: a decision an admission policy
// refuses is not sent again: the pod is released with its gate removed and
// nothing else, counted, and the workload's Warning Event names the policy,
// once for the burst.
func TestRefusedPlacementReleasesUnchanged(t *testing.T) {
	for name, refusal := range map[string]error{
		"ValidatingAdmissionPolicy": test.PolicyDenial("nginx-abc-000", "no-affinity-changes", "no-affinity-changes-web", "spec.affinity is immutable"),
		"Gatekeeper":                test.WebhookDenial("validation.gatekeeper.sh", 403, "[no-affinity-changes] spec.affinity is immutable"),
		"Kyverno":                   test.WebhookDenial("validate.kyverno.svc-fail", 0, "\n\nresource Pod/web/nginx-abc-000 was blocked due to the following policies\n\nno-affinity-changes:\n  check: spec.affinity is immutable\n"),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
			var sent atomic.Int32
			c := interceptor.NewClient(f.client.(client.WithWatch), refusing(&sent, refusal, changesAffinity))
			ctrl := placement.NewController(f.clock, c, f.recorder, &capacity.NodePoolCapacity{Reader: c}, f.tally, 30*time.Second)
			released := metrics.ReleasedTotal.WithLabelValues(placement.ReasonRefusedByAdmission)
			refused := metrics.RefusedTotal.WithLabelValues(decision.OperationDecide)
			releasedBefore, refusedBefore := testutil.ToFloat64(released), testutil.ToFloat64(refused)
			ctx := context.Background()
			const pods = 3
			for i := 0; i < pods; i++ {
				pod := f.gatedPod(t, i)
				sent.Store(0)
				res, err := ctrl.Reconcile(ctx, pod)
				if err != nil || res.RequeueAfter != 0 {
					t.Fatalf("pod %d: Reconcile = %+v, %v; want it done, not retried", i, res, err)
				}
				if n := sent.Load(); n != 2 {
					t.Errorf("pod %d: %d patches sent, want the refused decision and the release", i, n)
				}
				var fresh corev1.Pod
				if err := f.client.Get(ctx, client.ObjectKeyFromObject(pod), &fresh); err != nil {
					t.Fatal(err)
				}
				if len(fresh.Spec.SchedulingGates) != 0 || fresh.Spec.Affinity != nil || len(fresh.Spec.Tolerations) != len(pod.Spec.Tolerations) ||
					fresh.Annotations[annotations.Group] != "" || fresh.Annotations[annotations.Decision] != "" {
					t.Errorf("pod %d not released unchanged: gates %v, affinity %v, annotations %v", i, fresh.Spec.SchedulingGates, fresh.Spec.Affinity, fresh.Annotations)
				}
				if f.tally.Decided(pod.UID) {
					t.Errorf("pod %d: the refused decision is still counted", i)
				}
			}
			if got := testutil.ToFloat64(released) - releasedBefore; got != pods {
				t.Errorf("released as refused_by_admission: %v, want %d", got, pods)
			}
			if got := testutil.ToFloat64(refused) - refusedBefore; got != pods {
				t.Errorf("refused decisions counted: %v, want %d", got, pods)
			}
			if n := len(f.recorder.Events); n != 1 {
				t.Fatalf("%d events, want 1 for the burst", n)
			}
			r, _ := decision.Refused(refusal)
			if e := <-f.recorder.Events; !strings.HasPrefix(e, "Warning PlacementRefused "+r.By+" refused apportion's placement: ") || !strings.Contains(e, "spec.affinity is immutable") {
				t.Errorf("event %q; want a PlacementRefused Warning naming %s and its message", e, r.By)
			}
		})
	}
}

// TestRefusedReleaseIsLeftToTheJanitor: when the policy refuses the gate's
// removal too, the pod stays gated for the gate janitor: counted, and not
// retried by the placement controller.
func TestRefusedReleaseIsLeftToTheJanitor(t *testing.T) {
	f := newFixture(t, map[string]string{annotations.Strategy: seed004}, nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
	var sent atomic.Int32
	refusal := test.PolicyDenial("nginx-abc-000", "no-pod-updates", "no-pod-updates-web", "pods are immutable")
	c := interceptor.NewClient(f.client.(client.WithWatch), refusing(&sent, refusal, func([]byte) bool { return true }))
	ctrl := placement.NewController(f.clock, c, f.recorder, &capacity.NodePoolCapacity{Reader: c}, f.tally, 30*time.Second)
	refusedRelease := metrics.RefusedTotal.WithLabelValues(decision.OperationRelease)
	before := testutil.ToFloat64(refusedRelease)
	pod := f.gatedPod(t, 0)
	res, err := ctrl.Reconcile(context.Background(), pod)
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("Reconcile = %+v, %v; want it left to the gate janitor, not retried", res, err)
	}
	if n := sent.Load(); n != 2 {
		t.Errorf("%d patches sent, want the refused decision and the refused release", n)
	}
	if got := testutil.ToFloat64(refusedRelease) - before; got != 1 {
		t.Errorf("refused releases counted: %v, want 1", got)
	}
	var fresh corev1.Pod
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(pod), &fresh); err != nil {
		t.Fatal(err)
	}
	if !decision.HasGate(&fresh) {
		t.Error("the pod lost its gate though every patch was refused")
	}
	if f.tally.Decided(pod.UID) {
		t.Error("the refused decision is still counted")
	}
}

// TestRefusedShadowDecision: a policy that refuses the shadow annotation
// (no new annotation on a pod, say) gets the same answer: a gated pod is
// released with its gate removed alone, an ungated one is left as it is,
// and neither is retried.
func TestRefusedShadowDecision(t *testing.T) {
	writesShadow := func(patch []byte) bool { return strings.Contains(string(patch), annotations.Shadow) }
	for name, gated := range map[string]bool{"gated": true, "ungated": false} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, map[string]string{annotations.Strategy: seed004, annotations.Mode: annotations.ModeShadow},
				nodePool("od", 10, "on-demand"), nodePool("spot", 5, "spot"))
			var sent atomic.Int32
			refusal := test.WebhookDenial("validation.gatekeeper.sh", 403, "[no-new-annotations] annotations are immutable")
			c := interceptor.NewClient(f.client.(client.WithWatch), refusing(&sent, refusal, writesShadow))
			ctrl := placement.NewController(f.clock, c, f.recorder, &capacity.NodePoolCapacity{Reader: c}, f.tally, 30*time.Second)
			refused := metrics.RefusedTotal.WithLabelValues(decision.OperationDecide)
			before := testutil.ToFloat64(refused)
			var pod *corev1.Pod
			if gated {
				pod = f.gatedPod(t, 0)
			} else {
				pod = f.gatedPod(t, 0, ungated)
			}
			res, err := ctrl.Reconcile(context.Background(), pod)
			if err != nil || res.RequeueAfter != 0 {
				t.Fatalf("Reconcile = %+v, %v; want it done, not retried", res, err)
			}
			if got := testutil.ToFloat64(refused) - before; got != 1 {
				t.Errorf("refused decisions counted: %v, want 1", got)
			}
			wantSent := int32(1)
			if gated {
				wantSent = 2 // and the release
			}
			if n := sent.Load(); n != wantSent {
				t.Errorf("%d patches sent, want %d", n, wantSent)
			}
			var fresh corev1.Pod
			if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(pod), &fresh); err != nil {
				t.Fatal(err)
			}
			if decision.HasGate(&fresh) || fresh.Annotations[annotations.Shadow] != "" {
				t.Errorf("pod not released unchanged: gates %v, annotations %v", fresh.Spec.SchedulingGates, fresh.Annotations)
			}
			if f.tally.Decided(pod.UID) {
				t.Error("the refused shadow decision is still counted")
			}
		})
	}
}
