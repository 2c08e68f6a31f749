package deletioncost

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// costEntry is a managedFields entry holding the deletion cost annotation,
// as the API server records it for a writer.
func costEntry(manager string, at time.Time) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: at}, FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:controller.kubernetes.io/pod-deletion-cost":{},"f:apportion.dev/group":{}}}}`)}}
}

// TestSecondWriterWarns: a deletion cost that another field manager (here
// Karpenter's pod deletion-cost controller) wrote after the pod's creation
// is overwritten with apportion's order, and the workload gets one Warning
// Event naming the writer and the feature gate, counted; a cost apportion
// wrote itself, or one the pod template set at creation, is overwritten
// without a word.
func TestSecondWriterWarns(t *testing.T) {
	const strategy = "karpenter.sh/capacity-type=on-demand,weight=1:karpenter.sh/capacity-type=spot,weight=1"
	deploy, _ := test.Workload(map[string]string{annotations.Strategy: strategy})
	rs := test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc", UID: "nginx-abc-uid"}, deploy)
	created := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	pod := func(i int, group string, writers ...metav1.ManagedFieldsEntry) *corev1.Pod {
		p := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("nginx-abc-%d", i), UID: types.UID(fmt.Sprintf("nginx-abc-%d", i)),
			CreationTimestamp: metav1.NewTime(created.Add(time.Duration(i) * time.Second)),
			Labels:            map[string]string{workload.PodTemplateHashLabel: "abc"}}, Owner: rs})
		p.Annotations = map[string]string{annotations.Group: group, annotations.Signature: testSigner.Sign(p.UID, group, ""),
			Annotation: "7"} // no cost apportion would give
		p.ManagedFields = writers
		return p
	}
	const od, spot = "karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"
	cases := []struct {
		name  string
		pods  []*corev1.Pod
		warns string // the writer the Event names; "" for none
	}{
		{"karpenter", []*corev1.Pod{pod(0, od, costEntry("karpenter", created.Add(time.Minute))), pod(1, spot)}, "karpenter"},
		{"apportion itself", []*corev1.Pod{pod(0, od, costEntry(decision.FieldManager, created.Add(time.Minute))), pod(1, spot)}, ""},
		{"the pod template, at creation", []*corev1.Pod{pod(0, od, costEntry("kube-controller-manager", created)), pod(1, spot)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{deploy, rs}
			for _, p := range tc.pods {
				objs = append(objs, p)
			}
			// The fake client drops managedFields; the cache hands them
			// out as StripPod kept them: put the fixture's back on List.
			c := withManagedFields(ownedPodsClient(objs...), tc.pods)
			var got corev1.Pod
			fake := events.NewFakeRecorder(10)
			ctrl := NewController(c, testSigner).WithRecorder(apevents.NewRecorder(fake))
			before := testutil.ToFloat64(metrics.DeletionCostSecondWriterTotal)
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "web", Name: string(rs.UID)}}
			if _, err := ctrl.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.pods[0]), &got); err != nil {
				t.Fatal(err)
			}
			if got.Annotations[Annotation] == "7" {
				t.Errorf("the foreign cost was not overwritten")
			}
			var evs []string
			for len(fake.Events) > 0 {
				evs = append(evs, <-fake.Events)
			}
			counted := testutil.ToFloat64(metrics.DeletionCostSecondWriterTotal) - before
			if tc.warns == "" {
				if len(evs) != 0 || counted != 0 {
					t.Errorf("Events %q, counted %v; want none", evs, counted)
				}
				return
			}
			if len(evs) != 1 || !strings.Contains(evs[0], ReasonSecondWriter) || !strings.Contains(evs[0], tc.warns) ||
				!strings.Contains(evs[0], "PodDeletionCostManagement") {
				t.Errorf("Events %q; want one %s naming %s and the feature gate", evs, ReasonSecondWriter, tc.warns)
			}
			if counted != 1 {
				t.Errorf("counted %v overwrites; want 1", counted)
			}
		})
	}
}

// withManagedFields gives pods listed through c the managedFields of the
// same pods in fixtures.
func withManagedFields(c client.WithWatch, fixtures []*corev1.Pod) client.Client {
	fields := map[types.UID][]metav1.ManagedFieldsEntry{}
	for _, p := range fixtures {
		fields[p.UID] = decision.ForeignCostWriters(p)
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			if pods, ok := list.(*corev1.PodList); ok {
				for i := range pods.Items {
					pods.Items[i].ManagedFields = fields[pods.Items[i].UID]
				}
			}
			return nil
		},
	})
}
