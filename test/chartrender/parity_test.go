//go:build chart

package chartrender

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	rbacv1 "k8s.io/api/rbac/v1"
)

// No image is published yet: without controller.image.repository the chart
// refuses to render and says what to set; with it, the image is that
// repository at the chart's appVersion.
func TestImageRepositoryRequired(t *testing.T) {
	_, err := helmTemplate(t, chartDir, "--set", "controller.image.repository=")
	if err == nil || !strings.Contains(err.Error(), "--set controller.image.repository=<registry>/apportion") {
		t.Errorf("render without controller.image.repository: error %v, want one saying --set controller.image.repository=<registry>/apportion", err)
	}
	deploy := get(t, render(t), "Deployment", release)
	want := imageRepository + ":" + readChartMeta(t, chartDir).AppVersion
	if got := containerField(t, deploy, "image"); got != want {
		t.Errorf("image %q, want %q", got, want)
	}
}

// helm template without --kube-version (as kustomize's helmCharts runs it)
// renders the chart; a cluster below the compatibility matrix's floor is
// still refused, and a provider's version string above it is not.
func TestRendersWithoutKubeVersion(t *testing.T) {
	out, err := helmRun(t, []string{"template", release, chartDir, "-n", namespace,
		"--set", "controller.image.repository=" + imageRepository})
	if err != nil {
		t.Fatalf("helm template without --kube-version: %v", err)
	}
	get(t, objects(t, out), "Deployment", release)
	for _, c := range []struct {
		kube string
		ok   bool
	}{
		{"1.31.14", false},
		{"1.32.0", true},
		{"v1.32.9-eks-113cf36", true},
		{"1.36.4", true},
	} {
		_, err := helmTemplate(t, chartDir, "--kube-version", c.kube)
		switch {
		case c.ok && err != nil:
			t.Errorf("Kubernetes %s: %v", c.kube, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "Kubernetes 1.32 or newer")):
			t.Errorf("Kubernetes %s: error %v, want a refusal naming Kubernetes 1.32", c.kube, err)
		}
	}
}

// By default apportion's pods stay off the nodes Karpenter launches, as
// Karpenter's own chart keeps its controller off them; the default
// anti-affinity is kept, and `affinity.nodeAffinity: null` lifts it.
func TestKeptOffKarpenterNodes(t *testing.T) {
	offKarpenter := func(deploy *unstructured.Unstructured) bool {
		terms, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "affinity", "nodeAffinity",
			"requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
		if len(terms) == 0 {
			return false
		}
		// Every term must keep the pod off Karpenter's nodes (terms are ORed).
		for _, term := range terms {
			exprs, _, _ := unstructured.NestedSlice(term.(map[string]any), "matchExpressions")
			if !slices.ContainsFunc(exprs, func(e any) bool {
				m := e.(map[string]any)
				return m["key"] == "karpenter.sh/nodepool" && m["operator"] == "DoesNotExist"
			}) {
				return false
			}
		}
		return true
	}
	antiAffinity := func(deploy *unstructured.Unstructured) bool {
		terms, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "affinity", "podAntiAffinity",
			"requiredDuringSchedulingIgnoredDuringExecution")
		return len(terms) == 1
	}
	deploy := get(t, render(t), "Deployment", release)
	if !offKarpenter(deploy) || !antiAffinity(deploy) {
		t.Errorf("default affinity: off Karpenter's nodes %t, one replica per node %t; want both", offKarpenter(deploy), antiAffinity(deploy))
	}
	deploy = get(t, render(t, "affinity.nodeAffinity=null"), "Deployment", release)
	if offKarpenter(deploy) || !antiAffinity(deploy) {
		t.Errorf("affinity.nodeAffinity=null: off Karpenter's nodes %t, one replica per node %t; want only the anti-affinity", offKarpenter(deploy), antiAffinity(deploy))
	}
}

// service.annotations go on the Service only, with additionalAnnotations;
// on a clash the Service's own wins.
func TestServiceAnnotations(t *testing.T) {
	objs := render(t, "service.annotations.example\\.com/scrape=metrics",
		"service.annotations.team=service", "additionalAnnotations.team=everyone", "additionalAnnotations.owner=platform")
	got := get(t, objs, "Service", release).GetAnnotations()
	want := map[string]string{"example.com/scrape": "metrics", "team": "service", "owner": "platform"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Service annotation %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if a := get(t, objs, "Deployment", release).GetAnnotations(); a["example.com/scrape"] != "" || a["team"] != "everyone" {
		t.Errorf("Deployment annotations %v: want additionalAnnotations only", a)
	}
}

// additionalClusterRoleRules are appended to apportion's ClusterRole as
// given, after its own rules.
func TestAdditionalClusterRoleRules(t *testing.T) {
	plain := clusterRoleRules(t, render(t))
	extra := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"proxy-ca"}, Verbs: []string{"get"}}
	out, err := helmTemplate(t, chartDir, "--set-json", `additionalClusterRoleRules=[{"apiGroups":[""],"resources":["configmaps"],"resourceNames":["proxy-ca"],"verbs":["get"]}]`)
	if err != nil {
		t.Fatal(err)
	}
	got := clusterRoleRules(t, objects(t, out))
	want := append(slices.Clone(plain), extra)
	if !equalRules(got, want) {
		t.Errorf("ClusterRole rules with one additional rule:\n%v\nwant the default's with it appended:\n%v", got, want)
	}
}

// controller.metrics.secure: off by default (plain HTTP, no review rights,
// no reader role, the ServiceMonitor scrapes http); on, apportion serves
// HTTPS with Kubernetes authn/authz, may create TokenReviews and
// SubjectAccessReviews, a metrics-reader ClusterRole exists for Prometheus,
// and the ServiceMonitor scrapes https with its ServiceAccount token.
func TestMetricsSecure(t *testing.T) {
	reviews := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	reader := release + "-metrics-reader"
	for _, secure := range []bool{false, true} {
		set := []string{"serviceMonitor.enabled=true", "serviceMonitor.endpointConfig.interval=15s"}
		port, scheme := "http-metrics", "http"
		if secure {
			set = append(set, "controller.metrics.secure=true")
			port, scheme = "https-metrics", "https"
		}
		objs := render(t, set...)
		deploy := get(t, objs, "Deployment", release)
		if got := containerEnv(t, deploy)["METRICS_SECURE"]; (got == "true") != secure {
			t.Errorf("secure=%t: METRICS_SECURE %q", secure, got)
		}
		ports, _, _ := unstructured.NestedSlice(get(t, objs, "Service", release).Object, "spec", "ports")
		if !slices.ContainsFunc(ports, func(p any) bool {
			m := p.(map[string]any)
			return m["name"] == port && m["targetPort"] == port
		}) {
			t.Errorf("secure=%t: the Service has no port %s: %v", secure, port, ports)
		}
		rules := clusterRoleRules(t, objs)
		for _, r := range reviews {
			if has := slices.ContainsFunc(rules, func(x rbacv1.PolicyRule) bool { return equalRules([]rbacv1.PolicyRule{x}, []rbacv1.PolicyRule{r}) }); has != secure {
				t.Errorf("secure=%t: ClusterRole grants %v %v: %t", secure, r.Verbs, r.Resources, has)
			}
		}
		role, ok := objs["ClusterRole/"+reader]
		if ok != secure {
			t.Errorf("secure=%t: ClusterRole %s rendered: %t", secure, reader, ok)
		}
		if ok {
			got := rulesOf(t, role)
			want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
			if !equalRules(got, want) {
				t.Errorf("ClusterRole %s rules %v, want %v", reader, got, want)
			}
		}
		endpoints, _, _ := unstructured.NestedSlice(get(t, objs, "ServiceMonitor", release).Object, "spec", "endpoints")
		if len(endpoints) != 1 {
			t.Fatalf("secure=%t: ServiceMonitor endpoints %v, want one", secure, endpoints)
		}
		ep := endpoints[0].(map[string]any)
		if ep["port"] != port || ep["path"] != "/metrics" || ep["interval"] != "15s" {
			t.Errorf("secure=%t: ServiceMonitor endpoint %v, want port %s, path /metrics and endpointConfig's interval", secure, ep, port)
		}
		gotScheme, _ := ep["scheme"].(string)
		if gotScheme == "" {
			gotScheme = "http"
		}
		_, token := ep["bearerTokenFile"]
		_, tlsConfig := ep["tlsConfig"]
		if gotScheme != scheme || token != secure || tlsConfig != secure {
			t.Errorf("secure=%t: ServiceMonitor endpoint scheme %s, bearerTokenFile %t, tlsConfig %t", secure, gotScheme, token, tlsConfig)
		}
	}
}

func containerField(t *testing.T, deploy *unstructured.Unstructured, field string) string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatal("the Deployment has no container")
	}
	s, _ := containers[0].(map[string]any)[field].(string)
	return s
}

func containerEnv(t *testing.T, deploy *unstructured.Unstructured) map[string]string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	env := map[string]string{}
	for _, e := range containers[0].(map[string]any)["env"].([]any) {
		m := e.(map[string]any)
		v, _ := m["value"].(string)
		env[m["name"].(string)] = v
	}
	return env
}

func rulesOf(t *testing.T, u *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	b, err := yaml.Marshal(u.Object["rules"])
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	return rules
}

// clusterRoleRules are the rules of apportion's own ClusterRole.
func clusterRoleRules(t *testing.T, objs map[string]*unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	return rulesOf(t, get(t, objs, "ClusterRole", release))
}

func equalRules(a, b []rbacv1.PolicyRule) bool {
	ja, _ := yaml.Marshal(a)
	jb, _ := yaml.Marshal(b)
	return string(ja) == string(jb)
}

// NOTES.txt says where the pods may run while the default node affinity
// holds, and, with secure metrics, which ClusterRole to bind to Prometheus.
func TestNotesOnAffinityAndSecureMetrics(t *testing.T) {
	chart := withNotes(t)
	notes := func(set ...string) string {
		t.Helper()
		var flags []string
		for _, s := range set {
			flags = append(flags, "--set", s)
		}
		out, err := helmTemplate(t, chart, flags...)
		if err != nil {
			t.Fatal(err)
		}
		return str(get(t, objects(t, out), "ConfigMap", notesObject), "data", "notes")
	}
	const affinityNote, allowedNote, bindNote = "set karpenterNodes=allow", "annotated karpenter.sh/do-not-disrupt", "--clusterrole=apportion-metrics-reader"
	if n := notes(); !strings.Contains(n, affinityNote) || strings.Contains(n, allowedNote) || strings.Contains(n, bindNote) {
		t.Errorf("default NOTES.txt: want the affinity note and no metrics binding:\n%s", n)
	}
	if n := notes("affinity.nodeAffinity=null", "controller.metrics.secure=true"); strings.Contains(n, affinityNote) || strings.Contains(n, allowedNote) || !strings.Contains(n, bindNote) {
		t.Errorf("NOTES.txt without node affinity, with secure metrics: want no affinity note and the metrics binding:\n%s", n)
	}
	if n := notes("karpenterNodes=allow"); strings.Contains(n, affinityNote) || !strings.Contains(n, allowedNote) {
		t.Errorf("NOTES.txt with karpenterNodes=allow: want the note on Karpenter's nodes, not the affinity note:\n%s", n)
	}
}
