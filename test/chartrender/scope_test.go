//go:build chart

package chartrender

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// podWebhooks are the entries of the rendered MutatingWebhookConfiguration;
// flags are helm template's.
func podWebhooks(t *testing.T, flags ...string) []admissionregistrationv1.MutatingWebhook {
	t.Helper()
	out, err := helmTemplate(t, chartDir, flags...)
	if err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(get(t, objects(t, out), "MutatingWebhookConfiguration", release).Object, &mwc); err != nil {
		t.Fatal(err)
	}
	return mwc.Webhooks
}

// matching names the entries whose namespaceSelector selects a namespace
// with these labels.
func matching(t *testing.T, webhooks []admissionregistrationv1.MutatingWebhook, nsLabels map[string]string) []admissionregistrationv1.MutatingWebhook {
	t.Helper()
	var out []admissionregistrationv1.MutatingWebhook
	for _, w := range webhooks {
		sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
		if err != nil {
			t.Fatalf("%s: namespaceSelector: %v", w.Name, err)
		}
		if sel.Matches(labels.Set(nsLabels)) {
			out = append(out, w)
		}
	}
	return out
}

// With webhook.scope: namespaces (the default), every namespace's pods
// reach at most one pod webhook entry: a namespace labelled
// apportion.dev/placement: enabled or apportion.dev/architectures sends all
// its pods; any other only the pods the CEL condition picks (an
// apportion.dev/* annotation, a strategy under the AWS sample webhooks'
// names, a profile's runtimeClassName). An ignored or excluded namespace
// sends none.
func TestWebhookScopeNamespaces(t *testing.T) {
	webhooks := podWebhooks(t, "--set-json", "settings.runtimeClassProfiles="+kataRemote)
	objs := render(t)
	if got := envValue(t, get(t, objs, "Deployment", release), "WEBHOOK_SCOPE"); got != "namespaces" {
		t.Errorf("WEBHOOK_SCOPE %q, want namespaces", got)
	}
	for _, c := range []struct {
		name      string
		labels    map[string]string
		want      string // the one entry, "" for none
		condition bool   // whether it carries a match condition
	}{
		{"unlabelled", map[string]string{"kubernetes.io/metadata.name": "team-a"}, "annotated.pods.apportion.dev", true},
		{"labelled", map[string]string{"kubernetes.io/metadata.name": "team-a", "apportion.dev/placement": "enabled"}, "pods.apportion.dev", false},
		{"labelled otherwise", map[string]string{"kubernetes.io/metadata.name": "team-a", "apportion.dev/placement": "off"}, "annotated.pods.apportion.dev", true},
		{"architectures", map[string]string{"kubernetes.io/metadata.name": "team-a", "apportion.dev/architectures": "auto"}, "architectures.pods.apportion.dev", false},
		{"both", map[string]string{"kubernetes.io/metadata.name": "team-a", "apportion.dev/architectures": "auto", "apportion.dev/placement": "enabled"}, "pods.apportion.dev", false},
		{"ignored", map[string]string{"kubernetes.io/metadata.name": "team-a", "apportion.dev/ignore": "", "apportion.dev/placement": "enabled"}, "", false},
		{"excluded", map[string]string{"kubernetes.io/metadata.name": "kube-system", "apportion.dev/placement": "enabled"}, "", false},
	} {
		got := matching(t, webhooks, c.labels)
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("%s namespace: matches %s, want none", c.name, got[0].Name)
		case c.want == "":
		case len(got) != 1 || got[0].Name != c.want:
			var names []string
			for _, w := range got {
				names = append(names, w.Name)
			}
			t.Errorf("%s namespace: matches %v, want only %s", c.name, names, c.want)
		case c.condition != (len(got[0].MatchConditions) > 0):
			t.Errorf("%s namespace: entry %s has match conditions %v, want some: %v", c.name, got[0].Name, got[0].MatchConditions, c.condition)
		}
	}
	for _, w := range webhooks {
		if w.Name != "annotated.pods.apportion.dev" {
			continue
		}
		if len(w.MatchConditions) != 1 {
			t.Fatalf("%s: %d match conditions, want one (conditions are ANDed)", w.Name, len(w.MatchConditions))
		}
		expr := w.MatchConditions[0].Expression
		for _, want := range []string{"k.startsWith('apportion.dev/')", "'custom-pod-schedule-strategy'", "'CustomPodScheduleStrategy'", "object.spec.runtimeClassName in ['kata-remote']"} {
			if !strings.Contains(expr, want) {
				t.Errorf("%s: condition %q does not test %s", w.Name, expr, want)
			}
		}
	}
}

// webhook.scope: all, and settings.architectures: all (which places every
// pod), keep one pod webhook entry for every pod outside the excluded and
// ignored namespaces, and apportion labels no namespace.
func TestWebhookScopeAll(t *testing.T) {
	for _, set := range [][]string{{"webhook.scope=all"}, {"settings.architectures=all"}} {
		webhooks := podWebhooks(t, "--set", set[0])
		if len(webhooks) != 1 || webhooks[0].Name != "pods.apportion.dev" || len(webhooks[0].MatchConditions) != 0 {
			t.Errorf("%v: want the one entry pods.apportion.dev without match conditions, got %d entries", set, len(webhooks))
			continue
		}
		if len(matching(t, webhooks, map[string]string{"kubernetes.io/metadata.name": "team-a"})) != 1 {
			t.Errorf("%v: an unlabelled namespace's pods do not reach pods.apportion.dev", set)
		}
		if got := envValue(t, get(t, render(t, set...), "Deployment", release), "WEBHOOK_SCOPE"); got != "all" {
			t.Errorf("%v: WEBHOOK_SCOPE %q, want all", set, got)
		}
	}
}
