//go:build e2e

package policy_test

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/test/framework"
)

// affinityUnchanged is the check of restrictive Kyverno or Gatekeeper
// policies: a pod's affinity never changes after its creation.
const affinityUnchanged = `has(object.spec.affinity) == has(oldObject.spec.affinity) &&
	(!has(object.spec.affinity) || object.spec.affinity == oldObject.spec.affinity)`

// noAffinityChanges is a ValidatingAdmissionPolicy, and its binding, that
// refuses every pod UPDATE in ns that changes spec.affinity, apportion's
// placement patch included.
func noAffinityChanges(ns string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	name := "no-affinity-changes-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: affinityUnchanged, Message: "spec.affinity is immutable"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
	return policy, binding
}

// waitEnforced waits until the API server enforces the policy in ns: a dry
// run that sets a gated probe pod's affinity is refused by it.
func waitEnforced(t *testing.T, ns, policy string) {
	t.Helper()
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "policy-probe"},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/probe"}},
			Containers:      []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		},
	}
	create(t, probe)
	defer func() { _ = env.Kube.Delete(context.Background(), probe) }()
	framework.WaitFor(t, time.Minute, "ValidatingAdmissionPolicy "+policy+" enforced", func() error {
		var cur corev1.Pod
		if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(probe), &cur); err != nil {
			return err
		}
		changed := cur.DeepCopy()
		changed.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "example.com/probe", Operator: corev1.NodeSelectorOpIn, Values: []string{"x"}}}}}}}}
		err := env.Kube.Patch(t.Context(), changed, client.MergeFrom(&cur), client.DryRunAll)
		if r, ok := decision.Refused(err); ok && strings.Contains(r.By, policy) {
			return nil
		}
		return fmt.Errorf("a change of affinity got %w", err)
	})
}

// placementMetric sums a counter's series with labels over the replicas.
func placementMetric(t *testing.T, name, labels string) float64 {
	t.Helper()
	prefix := name + "{" + labels + "} "
	var sum float64
	for _, r := range env.Replicas {
		text, err := r.Metrics()
		if err != nil {
			t.Fatalf("metrics of %s: %v", r.Name, err)
		}
		sc := bufio.NewScanner(strings.NewReader(text))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("metrics of %s: %q: %v", r.Name, sc.Text(), err)
				}
				sum += f
			}
		}
	}
	return sum
}

// TestRefusedByAdmissionPolicy: with a ValidatingAdmissionPolicy that
// refuses any change of a pod's affinity (as restrictive Kyverno or
// Gatekeeper policies do), apportion's placement patch is refused; the pods
// of an opted-in Deployment are released unchanged at once (not left gated
// for the gate janitor), the refusals are counted, and the Deployment's
// Warning Event names the policy and its binding. With the documented
// exclusion of pods held by apportion's gate, the new pods are placed.
func TestRefusedByAdmissionPolicy(t *testing.T) {
	ns := newNamespace(t)
	policy, binding := noAffinityChanges(ns)
	create(t, policy)
	t.Cleanup(func() { _ = env.Kube.Delete(context.Background(), policy) })
	create(t, binding)
	t.Cleanup(func() { _ = env.Kube.Delete(context.Background(), binding) })
	waitEnforced(t, ns, policy.Name)

	const (
		released = "apportion_placement_released_total"
		refused  = "apportion_placement_refused_total"
		pods     = 3
	)
	refusedBefore := placementMetric(t, released, `reason="refused_by_admission"`)
	timeoutBefore := placementMetric(t, released, `reason="timeout"`)
	decideBefore := placementMetric(t, refused, `operation="decide"`)

	d := deployment(ns, "refused", pods, map[string]string{annotations.Strategy: ct + "=" + onDemand + ",weight=1:" + ct + "=" + spot + ",weight=3"})
	create(t, d)
	for _, p := range waitRunning(t, ns, "refused", pods) {
		if p.pod.Spec.Affinity != nil || p.pod.Annotations[annotations.Group] != "" || p.pod.Annotations[annotations.Decision] != "" {
			t.Errorf("pod %s not released unchanged: affinity %+v, annotations %v", p.pod.Name, p.pod.Spec.Affinity, p.pod.Annotations)
		}
	}
	if got := placementMetric(t, released, `reason="refused_by_admission"`) - refusedBefore; got != pods {
		t.Errorf("pods released as refused_by_admission: %v, want %d", got, pods)
	}
	if got := placementMetric(t, released, `reason="timeout"`) - timeoutBefore; got != 0 {
		t.Errorf("pods released by the gate janitor: %v, want none (released when refused)", got)
	}
	if got := placementMetric(t, refused, `operation="decide"`) - decideBefore; got < pods {
		t.Errorf("refused decisions counted: %v, want at least %d", got, pods)
	}
	want := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' refused apportion's placement: spec.affinity is immutable", policy.Name, binding.Name)
	events := framework.Events(t, env.Kube, ns, 30*time.Second, func(e *corev1.Event) bool {
		return e.InvolvedObject.Kind == "Deployment" && e.InvolvedObject.Name == d.Name && e.Reason == "PlacementRefused"
	})
	msgs := framework.Messages(events)
	found := false
	for _, m := range msgs {
		found = found || strings.HasPrefix(m, want)
	}
	if !found {
		t.Errorf("PlacementRefused Events on the Deployment %q; want one starting %q", msgs, want)
	}

	t.Run("the exclusion of pods held by apportion's gate lets apportion place them", func(t *testing.T) {
		var cur admissionregistrationv1.ValidatingAdmissionPolicy
		if err := env.Kube.Get(t.Context(), client.ObjectKeyFromObject(policy), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-gated-by-apportion", Expression: notGatedByApportion}}
		if err := env.Kube.Update(t.Context(), &cur); err != nil {
			t.Fatal(err)
		}
		waitExempt(t, ns)
		refusedBefore := placementMetric(t, released, `reason="refused_by_admission"`)
		scale(t, d, 2*pods)
		placedPods := 0
		for _, p := range waitRunning(t, ns, "refused", 2*pods) {
			if p.pod.Annotations[annotations.Group] != "" && p.pod.Spec.Affinity != nil {
				placedPods++
			}
		}
		if placedPods != pods {
			t.Errorf("%d pods placed by apportion, want the %d new ones", placedPods, pods)
		}
		if got := placementMetric(t, released, `reason="refused_by_admission"`) - refusedBefore; got != 0 {
			t.Errorf("pods released as refused_by_admission after the exclusion: %v, want none", got)
		}
	})
}

// notGatedByApportion is the documented matchCondition that leaves the
// UPDATEs of pods held by apportion's placement gate out of a policy.
const notGatedByApportion = `!has(oldObject.spec.schedulingGates) ||
	!oldObject.spec.schedulingGates.exists(g, g.name == 'apportion.dev/placement')`

// waitExempt waits until the API server lets a pod held by apportion's gate
// change its affinity: a dry run on a fresh probe pod that holds it (and a
// gate of its own, so that it stays gated once apportion releases it). A
// probe apportion released first is refused: another one is tried.
func waitExempt(t *testing.T, ns string) {
	t.Helper()
	n := 0
	framework.WaitFor(t, time.Minute, "the exclusion of pods held by apportion's gate in force", func() error {
		n++
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("exempt-probe-%d", n)},
			Spec: corev1.PodSpec{
				SchedulingGates: []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}, {Name: "example.com/probe"}},
				Containers:      []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
			},
		}
		if err := env.Kube.Create(t.Context(), probe); err != nil {
			return err
		}
		defer func() { _ = env.Kube.Delete(context.Background(), probe) }()
		changed := probe.DeepCopy()
		changed.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "example.com/probe", Operator: corev1.NodeSelectorOpIn, Values: []string{"x"}}}}}}}}
		return env.Kube.Patch(t.Context(), changed, client.MergeFrom(probe), client.DryRunAll)
	})
}
