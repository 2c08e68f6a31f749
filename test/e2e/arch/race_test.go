//go:build e2e

package arch_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/framework"
)

// The not-yet-cached ReplicaSet race: pods created right after their
// ReplicaSet, before the webhook's cache has it, are gated (the webhook
// cannot know yet whether the workload asked for placement). The controller
// must then release those of a workload that never opted in unchanged, not
// place them by the architecture of their (inspectable, amd64-only) image.
//
// Each ReplicaSet wants 2 replicas and its template names a ServiceAccount
// that does not exist, so the ReplicaSet controller can create no pod of its
// own (the API server refuses them) and, once it sees the test's 2 pods,
// deletes none either: every pod is the test's, created within milliseconds
// of its owner.
func TestNotYetCachedReplicaSetsAreLeftAlone(t *testing.T) {
	t.Parallel()
	const sets, perSet = 12, 2
	reg := newRegistry(t, imgAmd64)
	ns := newNamespace(t, nil)
	framework.WaitFor(t, time.Minute, "ServiceAccount default in "+ns, func() error {
		return env.Kube.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
	})

	// Every pod state the API reports, from before the first create.
	wc, err := client.NewWithWatch(env.C.RESTConfig(), client.Options{Scheme: env.Kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(t.Context(), &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var problems []string
	gated, states := map[string]bool{}, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			states++
			if !ungated(p) {
				gated[p.Name] = true
			}
			for _, c := range changesTo(p) {
				if s := fmt.Sprintf("pod %s (%s, resourceVersion %s): %s", p.Name, ev.Type, p.ResourceVersion, c); !slices.Contains(problems, s) {
					problems = append(problems, s)
				}
			}
			mu.Unlock()
		}
	}()
	defer func() { w.Stop(); <-done }()

	image := reg.Ref(imgAmd64)
	var wg sync.WaitGroup
	for i := range sets {
		wg.Go(func() {
			name := fmt.Sprintf("rs-%02d", i)
			labels := map[string]string{"app": name, appsv1.DefaultDeploymentUniqueLabelKey: fmt.Sprintf("h%02d", i)}
			spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}
			tmpl := *spec.DeepCopy()
			tmpl.ServiceAccountName = "absent" // the ReplicaSet controller creates nothing
			rs := &appsv1.ReplicaSet{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
				Spec: appsv1.ReplicaSetSpec{
					Replicas: ptr.To[int32](perSet),
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl},
				},
			}
			if err := env.Kube.Create(t.Context(), rs); err != nil {
				t.Errorf("creating ReplicaSet %s: %v", name, err)
				return
			}
			for j := range perSet {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{
						Namespace: ns, Name: fmt.Sprintf("%s-%d", name, j), Labels: labels,
						OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: rs.UID, Controller: ptr.To(true)}},
					},
					Spec: spec,
				}
				if err := env.Kube.Create(t.Context(), pod); err != nil {
					t.Errorf("creating pod %s: %v", pod.Name, err)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// The controller waits up to the gate timeout for the owner to be cached.
	var pods corev1.PodList
	framework.WaitFor(t, gateTimeout+time.Minute, fmt.Sprintf("%d ungated pods", sets*perSet), func() error {
		if err := env.Kube.List(t.Context(), &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		n := 0
		for i := range pods.Items {
			if ungated(&pods.Items[i]) && pods.Items[i].DeletionTimestamp == nil {
				n++
			}
		}
		if len(pods.Items) != sets*perSet || n != sets*perSet {
			return fmt.Errorf("%d pods, %d ungated", len(pods.Items), n)
		}
		return nil
	})
	for i := range pods.Items {
		for _, c := range changesTo(&pods.Items[i]) {
			t.Errorf("pod %s, ungated: %s", pods.Items[i].Name, c)
		}
	}
	select {
	case <-done:
		t.Errorf("the pod watch ended early: not every pod state was seen")
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if len(gated) == 0 {
		t.Logf("the race was NOT hit this run: none of the %d pods was gated (%d pod states watched): only the uncontended path was checked", sets*perSet, states)
	} else {
		t.Logf("the race was hit: %d of %d pods were gated before their ReplicaSet was cached (%d pod states watched)", len(gated), sets*perSet, states)
	}
	if n := reg.Count("", framework.ManifestPath(imgAmd64)); n != 0 {
		t.Logf("the image was looked up %d times (the workloads never opted in)", n)
	}
}

// changesTo lists what apportion may not do to a pod that did not opt in,
// and that the test did not set: an apportion.dev/ annotation, any affinity,
// a nodeSelector, a toleration (but the API server's DefaultTolerationSeconds
// pair).
func changesTo(p *corev1.Pod) []string {
	var out []string
	for _, k := range apportionAnnotations(p) {
		out = append(out, fmt.Sprintf("annotation %s=%q", k, p.Annotations[k]))
	}
	if p.Spec.Affinity != nil {
		out = append(out, fmt.Sprintf("affinity %+v", *p.Spec.Affinity))
	}
	if len(p.Spec.NodeSelector) > 0 {
		out = append(out, fmt.Sprintf("nodeSelector %v", p.Spec.NodeSelector))
	}
	for _, tol := range p.Spec.Tolerations {
		if (tol.Key == corev1.TaintNodeNotReady || tol.Key == corev1.TaintNodeUnreachable) && tol.Effect == corev1.TaintEffectNoExecute {
			continue
		}
		out = append(out, fmt.Sprintf("toleration %s %s %s", tol.Key, tol.Operator, tol.Effect))
	}
	return out
}
