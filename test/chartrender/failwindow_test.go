//go:build chart

package chartrender

import (
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// A replica that stops answering leaves the Service's endpoints within a
// few seconds: at worst failureThreshold periods after its last answer, plus
// the last probe's timeout. Liveness stays lenient, so that a replica slow
// under a burst is not restarted, and every admission call gives up within
// the webhook timeout.
func TestFailureWindow(t *testing.T) {
	objs := render(t)
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(get(t, objs, "Deployment", release).Object, &d); err != nil {
		t.Fatal(err)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	rp, lp := ctr.ReadinessProbe, ctr.LivenessProbe
	if rp == nil || lp == nil {
		t.Fatal("want a readiness and a liveness probe")
	}
	sec := func(n int32) time.Duration { return time.Duration(n) * time.Second }
	if out := sec(rp.PeriodSeconds*rp.FailureThreshold + rp.TimeoutSeconds); out > 5*time.Second {
		t.Errorf("readiness (period %ds, timeout %ds, %d failures) takes a frozen replica out after up to %s, want 5s or less",
			rp.PeriodSeconds, rp.TimeoutSeconds, rp.FailureThreshold, out)
	}
	if kill := sec(lp.PeriodSeconds * lp.FailureThreshold); kill < 30*time.Second || lp.TimeoutSeconds < 5 {
		t.Errorf("liveness (period %ds, timeout %ds, %d failures) restarts after %s, want 30s or more and a timeout of 5s or more",
			lp.PeriodSeconds, lp.TimeoutSeconds, lp.FailureThreshold, kill)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(get(t, objs, "MutatingWebhookConfiguration", release).Object, &mwc); err != nil {
		t.Fatal(err)
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(get(t, objs, "ValidatingWebhookConfiguration", release).Object, &vwc); err != nil {
		t.Fatal(err)
	}
	var timeouts []int32
	for _, w := range mwc.Webhooks {
		timeouts = append(timeouts, *w.TimeoutSeconds)
	}
	for _, w := range vwc.Webhooks {
		timeouts = append(timeouts, *w.TimeoutSeconds)
	}
	for _, s := range timeouts {
		if s != 2 {
			t.Errorf("webhook timeouts %v, want 2 s each", timeouts)
			break
		}
	}
}
