//go:build e2e

package smoke_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	// The split of the AWS sample webhook's example: 2 on-demand first,
	// then 1 on-demand to 3 spot.
	strategy     = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	capacityType = "karpenter.sh/capacity-type"
	nodePoolKey  = "karpenter.sh/nodepool"
)

// TestSmoke runs the steps in order; a failed step stops the rest.
func TestSmoke(t *testing.T) {
	steps := []struct {
		name string
		run  func(*testing.T)
	}{
		{"Versions", testVersions},
		{"Install", testInstall},
		{"StrategySplitByNodeLabels", testSplit},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("step %s failed; later steps depend on it", s.name)
		}
	}
}

// testVersions checks that the cluster runs the tools set's Kubernetes and
// that Karpenter's v1 NodePool API is served from the set's CRDs.
func testVersions(t *testing.T) {
	v, err := env.c.ToolVersions()
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if info.GitVersion != v["K8S_VERSION"] {
		t.Fatalf("the API server is %s, the tools set %q built %s", info.GitVersion, cluster.ToolsSet(), v["K8S_VERSION"])
	}
	// A versions.env written before sets existed has no TOOLS_SET: that
	// folder is the default set's.
	got := v["TOOLS_SET"]
	if got == "" {
		got = "default"
	}
	if want := cluster.ToolsSet(); got != want {
		t.Fatalf("the tools folder is set %q, the environment asks for %q", got, want)
	}
	resources, err := dc.ServerResourcesForGroupVersion("karpenter.sh/v1")
	if err != nil {
		t.Fatalf("karpenter.sh/v1 not served: %v", err)
	}
	var kinds []string
	for _, r := range resources.APIResources {
		if !strings.Contains(r.Name, "/") {
			kinds = append(kinds, r.Kind)
		}
	}
	sort.Strings(kinds)
	t.Logf("tools set %s: Kubernetes %s, Karpenter %s (kwok provider), etcd %s, kwok %s, helm %s; karpenter.sh/v1 serves %v",
		got, info.GitVersion, v["KARPENTER_VERSION"], v["ETCD_VERSION"], v["KWOK_VERSION"], v["HELM_VERSION"], kinds)
	if !strings.Contains(strings.Join(kinds, ","), "NodePool") {
		t.Fatalf("karpenter.sh/v1 serves no NodePool: %v", kinds)
	}
}

var installStart time.Time

// testInstall installs the chart as a user would (its kubeVersion
// constraint included) and waits for its replicas to run.
func testInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	installStart = time.Now()
	values := filepath.Join(framework.RepoRoot(), "test", "e2e", "smoke", "testdata", "values.yaml")
	out, err := helm(ctx, "install", release, filepath.Join(framework.RepoRoot(), "chart"), "-n", namespace, "--create-namespace",
		"-f", values, "--wait", "--timeout", "4m")
	if err != nil {
		t.Fatalf("helm install: %v\n%s\nkubelet:\n%s", err, out, logTail("kubelet", 30))
	}
	t.Logf("helm install --wait took %s", time.Since(installStart).Round(time.Millisecond))
	framework.WaitFor(t, 2*time.Minute, "the chart's 2 replicas running", func() error {
		if n := len(env.kubelet.Processes()); n != 2 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})
}

// testSplit scales a workload with the strategy to 10 replicas and checks
// the split exactly by the labels of the nodes the pods run on, and that
// every decision names the NodePool whose node the pod landed on (apportion
// read Karpenter's NodePools, not node labels alone).
func testSplit(t *testing.T) {
	ns := framework.NewNamespace(t, env.kube, framework.TestNamespaceName(t, "smoke"), nil)
	d := framework.Deployment(ns, "nginx", 10, map[string]string{annotations.Strategy: strategy},
		framework.AppPodSpec("public.ecr.aws/nginx/nginx:latest"))
	framework.Create(t, env.kube, d)
	var pods []corev1.Pod
	framework.WaitFor(t, 3*time.Minute, "10 Running pods", func() error {
		var list corev1.PodList
		if err := env.kube.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{"app": "nginx"}); err != nil {
			return err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				running++
			}
		}
		if running != 10 || len(list.Items) != 10 {
			return fmt.Errorf("%d of %d pods Running", running, len(list.Items))
		}
		pods = list.Items
		return nil
	})
	t.Logf("helm install to 10 Running pods: %s", time.Since(installStart).Round(time.Millisecond))
	counts := map[string]int{}
	pools := map[string]int{}
	for _, p := range pods {
		var node corev1.Node
		if err := env.kube.Get(t.Context(), client.ObjectKey{Name: p.Spec.NodeName}, &node); err != nil {
			t.Fatal(err)
		}
		counts[node.Labels[capacityType]]++
		group, pool := p.Annotations[annotations.Group], p.Annotations[annotations.NodePool]
		switch {
		case group == "":
			t.Errorf("pod %s has no decision", p.Name)
		case pool == "":
			t.Errorf("pod %s: decision %q names no NodePool", p.Name, group)
		case pool != node.Labels[nodePoolKey]:
			t.Errorf("pod %s: decision names NodePool %q, its node %s is of NodePool %q", p.Name, pool, node.Name, node.Labels[nodePoolKey])
		case group != capacityType+"="+node.Labels[capacityType]:
			t.Errorf("pod %s: decision group %q, its node's %s is %q", p.Name, group, capacityType, node.Labels[capacityType])
		default:
			pools[pool]++
		}
	}
	t.Logf("10 replicas by node label %s: %v; by the NodePool their decision names: %v", capacityType, counts, pools)
	if counts["on-demand"] != 4 || counts["spot"] != 6 || len(counts) != 2 {
		t.Errorf("want on-demand 4, spot 6 by node labels, got %v", counts)
	}
	for _, p := range env.kubelet.Processes() {
		if log := logTail(p.LogName, 400); strings.Contains(log, "placing on node labels alone") {
			t.Errorf("replica %s placed on node labels alone, not by Karpenter's NodePools:\n%s", p.LogName, log)
		}
	}
	if t.Failed() {
		fmt.Fprintf(os.Stderr, "karpenter log tail:\n%s\n", logTail("karpenter", 30))
	}
}
