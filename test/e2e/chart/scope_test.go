//go:build e2e

package chart_test

import (
	"bufio"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// podWebhookCalls sums the API server's apiserver_admission_webhook_request_total
// over the chart's pod webhook entries (every name ending in
// pods.apportion.dev), by entry.
func podWebhookCalls(t *testing.T) (int, map[string]int) {
	t.Helper()
	out, err := kubectl("get", "--raw", "/metrics")
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v\n%s", err, out)
	}
	byName := map[string]int{}
	total := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_admission_webhook_request_total{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "apiserver_admission_webhook_request_total{"), "} ")
		if !ok {
			continue
		}
		var name string
		for l := range strings.SplitSeq(labels, ",") {
			if v, ok := strings.CutPrefix(l, `name="`); ok {
				name = strings.TrimSuffix(v, `"`)
			}
		}
		if !strings.HasSuffix(name, "pods.apportion.dev") {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		byName[name] += int(n)
		total += int(n)
	}
	return total, byName
}

// testWebhookScope: with the chart's default webhook.scope: namespaces, the
// pods of a namespace that holds nothing opted in never call the pod
// webhook (the API server's own count of its calls does not move), while a
// workload that opts in in a fresh namespace, created right after the
// namespace and with its strategy on the Deployment (which its pods do not
// carry), and a workload targeted by a PlacementPolicy created just before
// it, have every pod held by the placement gate and decided: the workload
// validator and the policy validator label the namespace before the object
// is admitted, before its first pod exists.
func testWebhookScope(t *testing.T) {
	ctx := t.Context()
	const replicas = 4

	// (a) A namespace with no opted-in workload: no call.
	plain := newNamespace(t, "scope-plain")
	before, byName := podWebhookCalls(t)
	create(t, deployment(plain, "plain", replicas, nil))
	waitRunning(t, plain, "plain", replicas, 3*time.Minute)
	after, byNameAfter := podWebhookCalls(t)
	t.Logf("pod webhook calls while %d pods of a namespace with no opted-in workload were created: %d (before %v, after %v)",
		replicas, after-before, byName, byNameAfter)
	if after != before {
		t.Errorf("the pods of namespace %s, which holds nothing opted in, called the pod webhook %d times, want 0", plain, after-before)
	}
	var ns corev1.Namespace
	if err := env.kube.Get(ctx, client.ObjectKey{Name: plain}, &ns); err != nil {
		t.Fatal(err)
	}
	if v, ok := ns.Labels[annotations.NamespacePlacement]; ok {
		t.Errorf("namespace %s with no opted-in workload labelled %s=%s", plain, annotations.NamespacePlacement, v)
	}

	// (b) The first pods of newly opted-in workloads in fresh namespaces:
	// every one gated, then decided.
	before, _ = podWebhookCalls(t)
	for _, c := range []struct{ name, app string }{{"scope-strategy", "web"}, {"scope-policy", "api"}} {
		ns := newNamespace(t, c.name)
		seen := watchPods(ctx, t, ns)
		if c.app == "api" {
			policy := placementPolicy(ns, "api-split", map[string]any{
				"target":   map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": c.app},
				"strategy": map[string]any{"text": seed004},
			})
			if err := env.kube.Create(ctx, policy); err != nil {
				t.Fatalf("creating a PlacementPolicy: %v", err)
			}
			create(t, deployment(ns, c.app, replicas, nil))
		} else {
			create(t, deployment(ns, c.app, replicas, map[string]string{annotations.Strategy: seed004}))
		}
		pods := waitDecidedAll(t, ns, c.app, replicas, 2*time.Minute)
		_, states, gated := seen()
		var never []string
		for _, p := range pods {
			if !slices.Contains(gated, p.Name) {
				never = append(never, p.Name)
			}
		}
		t.Logf("%s: %d pods, %d held by the placement gate, %d pod states watched", ns, len(pods), len(gated), states)
		if len(never) > 0 {
			t.Errorf("%s: pods never held by the placement gate: %v", ns, never)
		}
		var got corev1.Namespace
		if err := env.kube.Get(ctx, client.ObjectKey{Name: ns}, &got); err != nil {
			t.Fatal(err)
		}
		if v := got.Labels[annotations.NamespacePlacement]; v != annotations.NamespacePlacementEnabled {
			t.Errorf("namespace %s: label %s=%q, want %s", ns, annotations.NamespacePlacement, v, annotations.NamespacePlacementEnabled)
		}
	}
	after, byNameAfter = podWebhookCalls(t)
	t.Logf("pod webhook calls for the %d pods of the two opted-in workloads: %d (%v)", 2*replicas, after-before, byNameAfter)
	if after-before < 2*replicas {
		t.Errorf("the pods of the opted-in workloads called the pod webhook %d times, want at least %d", after-before, 2*replicas)
	}
}
