//go:build chart

package chartrender

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// number is a rendered integer field (JSON numbers parse as float64).
func number(v any) int64 {
	switch n := v.(type) {
	case float64:
		return int64(n)
	case int64:
		return n
	case int:
		return int64(n)
	}
	return -1
}

// containerPorts are the apportion container's ports by name.
func containerPorts(t *testing.T, deploy *unstructured.Unstructured) map[string]int64 {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatal("the Deployment has no container")
	}
	ports := map[string]int64{}
	for _, p := range containers[0].(map[string]any)["ports"].([]any) {
		m := p.(map[string]any)
		ports[m["name"].(string)] = number(m["containerPort"])
	}
	return ports
}

// resolve is the container port a Service targetPort or probe port (a name
// or a number) reaches.
func resolve(ports map[string]int64, port any) int64 {
	if name, ok := port.(string); ok {
		if p, ok := ports[name]; ok {
			return p
		}
		return -1
	}
	return number(port)
}

// With hostNetwork the pods join the node's network and resolve cluster
// names (ClusterFirstWithHostNet); the webhook, metrics and health ports
// follow their values everywhere they are used: the container's ports and
// flags, both probes, and the Service's targetPorts (443 stays the port the
// API server calls).
func TestHostNetwork(t *testing.T) {
	spec := func(deploy *unstructured.Unstructured) (bool, string) {
		host, _, _ := unstructured.NestedBool(deploy.Object, "spec", "template", "spec", "hostNetwork")
		return host, str(deploy, "spec", "template", "spec", "dnsPolicy")
	}
	if host, dns := spec(get(t, render(t), "Deployment", release)); host || dns != "ClusterFirst" {
		t.Errorf("default: hostNetwork %t, dnsPolicy %q; want false, ClusterFirst", host, dns)
	}
	if _, dns := spec(get(t, render(t, "hostNetwork=true", "dnsPolicy=Default"), "Deployment", release)); dns != "Default" {
		t.Errorf("hostNetwork with dnsPolicy=Default: dnsPolicy %q, want the value's", dns)
	}

	const webhook, metrics, health = 9449, 8095, 8096
	objs := render(t, "hostNetwork=true", fmt.Sprintf("webhook.port=%d", webhook),
		fmt.Sprintf("controller.metrics.port=%d", metrics), fmt.Sprintf("controller.healthProbe.port=%d", health))
	deploy := get(t, objs, "Deployment", release)
	if host, dns := spec(deploy); !host || dns != "ClusterFirstWithHostNet" {
		t.Errorf("hostNetwork=true: hostNetwork %t, dnsPolicy %q; want true, ClusterFirstWithHostNet", host, dns)
	}
	ports := containerPorts(t, deploy)
	want := map[string]int64{"https-webhook": webhook, "http-metrics": metrics, "http-health": health}
	for name, p := range want {
		if ports[name] != p {
			t.Errorf("container port %s: %d, want %d (all: %v)", name, ports[name], p, ports)
		}
	}
	env := containerEnv(t, deploy)
	for name, v := range map[string]string{"WEBHOOK_PORT": fmt.Sprint(webhook),
		"METRICS_BIND_ADDRESS": fmt.Sprintf(":%d", metrics), "HEALTH_PROBE_BIND_ADDRESS": fmt.Sprintf(":%d", health)} {
		if env[name] != v {
			t.Errorf("%s=%q, want %q", name, env[name], v)
		}
	}
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		port, _, _ := unstructured.NestedFieldNoCopy(containers[0].(map[string]any), probe, "httpGet", "port")
		if got := resolve(ports, port); got != health {
			t.Errorf("%s reaches port %d (%v), want %d", probe, got, port, health)
		}
	}
	svcPorts, _, _ := unstructured.NestedSlice(get(t, objs, "Service", release).Object, "spec", "ports")
	targets := map[string][2]int64{}
	for _, p := range svcPorts {
		m := p.(map[string]any)
		targets[m["name"].(string)] = [2]int64{number(m["port"]), resolve(ports, m["targetPort"])}
	}
	if got := targets["https-webhook"]; got != [2]int64{443, webhook} {
		t.Errorf("Service https-webhook: port %d to container port %d, want 443 to %d", got[0], got[1], webhook)
	}
	if got := targets["http-metrics"]; got != [2]int64{metrics, metrics} {
		t.Errorf("Service http-metrics: port %d to container port %d, want %d to %d", got[0], got[1], metrics, metrics)
	}
}

// The three ports must differ; with hostNetwork they are bound on the node,
// so a port below 1024 (apportion runs as a non-root user without
// capabilities) and the ports of the kubelet, kube-proxy and the Amazon VPC
// CNI are refused with a message that names the value, and the schema keeps
// every port within 1-65535.
func TestPortsRefused(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string // in helm's error; empty: renders
	}{
		{set: []string{"controller.metrics.port=9443"}, want: "controller.metrics.port and webhook.port are both 9443"},
		{set: []string{"controller.healthProbe.port=8080"}, want: "controller.healthProbe.port and controller.metrics.port are both 8080"},
		{set: []string{"hostNetwork=true", "webhook.port=10250"}, want: "webhook.port=10250: with hostNetwork apportion binds the port on the node, where the kubelet already listens on it"},
		{set: []string{"hostNetwork=true", "controller.metrics.port=10249"}, want: "controller.metrics.port=10249: with hostNetwork apportion binds the port on the node, where kube-proxy's metrics already listens"},
		{set: []string{"hostNetwork=true", "controller.healthProbe.port=61678"}, want: "controller.healthProbe.port=61678: with hostNetwork apportion binds the port on the node, where the Amazon VPC CNI's metrics (aws-node)"},
		{set: []string{"hostNetwork=true", "controller.metrics.port=8162"}, want: "network policy agent"},
		{set: []string{"hostNetwork=true", "webhook.port=443"}, want: "webhook.port=443: with hostNetwork apportion binds the port on the node, and as a non-root user without capabilities it cannot bind one below 1024"},
		{set: []string{"webhook.port=0"}, want: "at '/webhook/port': minimum"},
		{set: []string{"controller.metrics.port=65536"}, want: "at '/controller/metrics/port': maximum"},
		{set: []string{"controller.healthProbe.port=-1"}, want: "at '/controller/healthProbe/port': minimum"},
		// Without hostNetwork the pod has ports of its own.
		{set: []string{"webhook.port=10250"}},
		{set: []string{"webhook.port=443"}},
		// The chart's defaults are free on an EKS node.
		{set: []string{"hostNetwork=true"}},
		{set: []string{"hostNetwork=true", "webhook.port=9449", "controller.metrics.port=8095", "controller.healthProbe.port=8096"}},
	} {
		var flags []string
		for _, s := range tc.set {
			flags = append(flags, "--set", s)
		}
		_, err := helmTemplate(t, chartDir, flags...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v, want it rendered", tc.set, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one saying %q", tc.set, err, tc.want)
		}
	}
}

// nodeAffinityOf is the Deployment's spec.template.spec.affinity.nodeAffinity.
func nodeAffinityOf(deploy *unstructured.Unstructured) map[string]any {
	na, _, _ := unstructured.NestedMap(deploy.Object, "spec", "template", "spec", "affinity", "nodeAffinity")
	return na
}

// karpenterNodes=allow drops the karpenter.sh/nodepool DoesNotExist
// expression from the required node affinity (keeping the user's other
// expressions) and puts no preferred term in its place: Karpenter ignores a
// pending pod whose heaviest preferred term asks for karpenter.sh/nodepool
// DoesNotExist, and would launch no node for it. The pods are annotated
// karpenter.sh/do-not-disrupt, unless podAnnotations says otherwise.
func TestKarpenterNodesAllow(t *testing.T) {
	deploy := get(t, render(t, "karpenterNodes=allow"), "Deployment", release)
	if na := nodeAffinityOf(deploy); len(na) != 0 {
		t.Errorf("karpenterNodes=allow: node affinity %v, want none", na)
	}
	anti, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
	if len(anti) != 1 {
		t.Errorf("karpenterNodes=allow: the one-replica-per-node anti-affinity is gone: %v", anti)
	}
	if got := deploy.GetAnnotations(); got["karpenter.sh/do-not-disrupt"] != "" {
		t.Errorf("the Deployment itself is annotated: %v", got)
	}
	annotations, _, _ := unstructured.NestedStringMap(deploy.Object, "spec", "template", "metadata", "annotations")
	if annotations["karpenter.sh/do-not-disrupt"] != "true" {
		t.Errorf("karpenterNodes=allow: pod annotations %v, want karpenter.sh/do-not-disrupt: \"true\"", annotations)
	}

	// The user's own expressions stay required, without Karpenter's.
	out, err := helmTemplate(t, chartDir, "--set", "karpenterNodes=allow", "--set-string", "podAnnotations.karpenter\\.sh/do-not-disrupt=false",
		"--set-json", `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms=[{"matchExpressions":[`+
			`{"key":"karpenter.sh/nodepool","operator":"DoesNotExist"},{"key":"node-role","operator":"In","values":["system"]}]}]`)
	if err != nil {
		t.Fatal(err)
	}
	deploy = get(t, objects(t, out), "Deployment", release)
	const wantRequired = `{"nodeSelectorTerms":[{"matchExpressions":[{"key":"node-role","operator":"In","values":["system"]}]}]}`
	if got := toJSON(t, nodeAffinityOf(deploy)["requiredDuringSchedulingIgnoredDuringExecution"]); !sameJSON(t, got, wantRequired) {
		t.Errorf("karpenterNodes=allow with a term of the user's: required %s, want %s", got, wantRequired)
	}
	annotations, _, _ = unstructured.NestedStringMap(deploy.Object, "spec", "template", "metadata", "annotations")
	if annotations["karpenter.sh/do-not-disrupt"] != "false" {
		t.Errorf("podAnnotations karpenter.sh/do-not-disrupt=false: pod annotations %v, want the user's value", annotations)
	}

	// avoid (the default) does not annotate.
	deploy = get(t, render(t), "Deployment", release)
	annotations, _, _ = unstructured.NestedStringMap(deploy.Object, "spec", "template", "metadata", "annotations")
	if _, ok := annotations["karpenter.sh/do-not-disrupt"]; ok {
		t.Errorf("karpenterNodes=avoid: pod annotations %v, want no karpenter.sh/do-not-disrupt", annotations)
	}
	if _, err := helmTemplate(t, chartDir, "--set", "karpenterNodes=sometimes"); err == nil || !strings.Contains(err.Error(), "at '/karpenterNodes'") {
		t.Errorf("karpenterNodes=sometimes: error %v, want the schema's refusal", err)
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withNodes copies chart/ into a temporary folder in which the Node lookup
// returns nodesJSON, as `helm install` would read it from a cluster (helm
// template's lookup sees none).
func withNodes(t *testing.T, nodesJSON string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "chart")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	helpers := filepath.Join(dir, "templates", "_helpers.tpl")
	text, err := os.ReadFile(helpers)
	if err != nil {
		t.Fatal(err)
	}
	const lookup = `lookup "v1" "Node" "" ""`
	if strings.Count(string(text), lookup) != 1 {
		t.Fatalf("_helpers.tpl does not look Nodes up once with %s", lookup)
	}
	replaced := strings.Replace(string(text), lookup, fmt.Sprintf("fromJson %q", nodesJSON), 1)
	if err := os.WriteFile(helpers, []byte(replaced), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func nodeList(labels ...string) string {
	var items []string
	for i, l := range labels {
		items = append(items, fmt.Sprintf(`{"metadata":{"name":"node-%d","labels":{%s}}}`, i, l))
	}
	return `{"apiVersion":"v1","kind":"NodeList","items":[` + strings.Join(items, ",") + `]}`
}

// On a cluster whose every node carries karpenter.sh/nodepool (EKS Auto
// Mode), the default affinity would leave the pods Pending and the webhook
// silently failing open: the install is refused with a message that names
// karpenterNodes=allow. A node Karpenter did not launch, karpenterNodes=allow,
// affinity.nodeAffinity=null, or no cluster at all (helm template) lets it
// through.
func TestKarpenterNodesCheck(t *testing.T) {
	const karpenter, nodeGroup = `"karpenter.sh/nodepool":"default","kubernetes.io/os":"linux"`,
		`"eks.amazonaws.com/nodegroup":"system","kubernetes.io/os":"linux"`
	const refusal = "Set --set karpenterNodes=allow to run apportion on Karpenter's nodes"
	for _, tc := range []struct {
		name, nodes string
		set         []string
		want        string // in helm's error; empty: renders
	}{
		{name: "every node Karpenter's", nodes: nodeList(karpenter, karpenter), want: "every node of this cluster (2) carries the label karpenter.sh/nodepool"},
		{name: "every node Karpenter's, refusal names the value", nodes: nodeList(karpenter), want: refusal},
		{name: "no node at all", nodes: nodeList(), want: refusal},
		{name: "a managed node group", nodes: nodeList(karpenter, nodeGroup)},
		{name: "karpenterNodes=allow", nodes: nodeList(karpenter, karpenter), set: []string{"karpenterNodes=allow"}},
		{name: "affinity.nodeAffinity=null", nodes: nodeList(karpenter), set: []string{"affinity.nodeAffinity=null"}},
		{name: "helm template: no cluster", nodes: `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var flags []string
			for _, s := range tc.set {
				flags = append(flags, "--set", s)
			}
			_, err := helmTemplate(t, withNodes(t, tc.nodes), flags...)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%v, want it rendered", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
