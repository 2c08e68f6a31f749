//go:build e2e

package chart_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const nodePoolLabel = "karpenter.sh/nodepool"

// TestEveryNodeKarpenters installs the chart, with its default values, on a
// cluster whose every node Karpenter launched (the local cluster's kwok
// nodes, as on EKS Auto Mode). With the default affinity the pods could
// never run and the webhook would admit every pod unchanged without a word:
// `helm install --wait` fails at once, creates nothing, and names the value
// to set. With karpenterNodes=allow the same install runs both replicas on
// Karpenter's nodes, annotated karpenter.sh/do-not-disrupt, and a placement
// leader is elected.
func TestEveryNodeKarpenters(t *testing.T) {
	const rel = "apportion-karpenter-nodes"
	ns := rel
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()

	// A workload of the cluster's own has Karpenter launch a node, so that
	// the cluster has nodes, all of them Karpenter's.
	trigger := newNamespace(t, "karpenter-nodes")
	create(t, deployment(trigger, "app", 1, nil))
	waitFor(t, 3*time.Minute, "a node Karpenter launched", func() error {
		var nodes corev1.NodeList
		if err := env.kube.List(ctx, &nodes); err != nil {
			return err
		}
		if len(nodes.Items) == 0 {
			return errors.New("no node yet")
		}
		for _, n := range nodes.Items {
			if _, ok := n.Labels[nodePoolLabel]; !ok {
				t.Fatalf("node %s has no %s label: this test needs a cluster whose every node is Karpenter's", n.Name, nodePoolLabel)
			}
		}
		return nil
	})
	t.Cleanup(func() {
		if out, err := kubectl("delete", "namespace", trigger, "--wait=false"); err != nil {
			t.Logf("deleting namespace %s: %v: %s", trigger, err, out)
		}
	})

	values := []string{"-n", ns, "--create-namespace", "--set", "controller.image.repository=apportion.invalid/apportion",
		"--set", "podLabels.e2e\\.apportion\\.dev/process=apportion", "--set", "releaseGatesOnUninstall=false"}

	// The defaults: refused before anything is created, with the value to set.
	start := time.Now()
	out, err := helm(ctx, append([]string{"install", rel, chartDir(), "--wait", "--timeout", "4m"}, values...)...)
	if err == nil {
		uninstall(t, rel, ns)
		t.Fatalf("helm install --wait with the default affinity succeeded on a cluster of Karpenter nodes only:\n%s", out)
	}
	t.Logf("helm install --wait with the defaults failed after %s:\n%s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	for _, want := range []string{"apportion's pods would stay Pending", "carries the label karpenter.sh/nodepool", "--set karpenterNodes=allow"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm's message does not say %q:\n%s", want, out)
		}
	}
	if status, err := helm(ctx, "status", rel, "-n", ns); err == nil {
		t.Errorf("the refused install left a release:\n%s", status)
	}
	var deploys appsv1.DeploymentList
	if err := env.kube.List(ctx, &deploys, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(deploys.Items) != 0 {
		t.Errorf("the refused install created %d Deployment(s)", len(deploys.Items))
	}

	// karpenterNodes=allow: the same install runs on Karpenter's nodes.
	start = time.Now()
	out, err = helm(ctx, append([]string{"install", rel, chartDir(), "--set", "karpenterNodes=allow", "--wait", "--timeout", "6m"}, values...)...)
	if err != nil {
		t.Fatalf("helm install --set karpenterNodes=allow --wait: %v\n%s\nkubelet:\n%s", err, out, logTail("kubelet", 30))
	}
	t.Cleanup(func() { uninstall(t, rel, ns) })
	t.Logf("helm install --set karpenterNodes=allow --wait took %s", time.Since(start).Round(time.Millisecond))

	waitFor(t, 4*time.Minute, "both replicas Ready on two of Karpenter's nodes", func() error {
		var pods corev1.PodList
		if err := env.kube.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		nodes := map[string]bool{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !podIsReady(&p) {
				continue
			}
			if got := p.Annotations["karpenter.sh/do-not-disrupt"]; got != "true" {
				t.Fatalf("pod %s: karpenter.sh/do-not-disrupt %q, want \"true\"", p.Name, got)
			}
			var node corev1.Node
			if err := env.kube.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &node); err != nil {
				return err
			}
			if node.Labels[nodePoolLabel] == "" {
				t.Fatalf("pod %s runs on node %s, which Karpenter did not launch", p.Name, node.Name)
			}
			nodes[node.Name] = true
		}
		// One replica per node: with a node of the cluster's own taken by
		// the first, Karpenter launched a node for the second.
		if len(nodes) != 2 {
			return fmt.Errorf("Ready on %d node(s), want 2", len(nodes))
		}
		return nil
	})
	waitFor(t, 2*time.Minute, "a placement leader", func() error {
		var lease coordinationv1.Lease
		if err := env.kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: rel}, &lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("the Lease has no holder")
		}
		if lease.Spec.RenewTime == nil || time.Since(lease.Spec.RenewTime.Time) > time.Minute {
			return fmt.Errorf("the Lease was last renewed at %v", lease.Spec.RenewTime)
		}
		return nil
	})
}

// uninstall removes the release and its namespace and waits until the
// release's processes have exited, so that later tests count only their own.
func uninstall(t *testing.T, rel, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := helm(ctx, "uninstall", rel, "-n", ns, "--wait", "--timeout", "4m"); err != nil {
		t.Errorf("helm uninstall %s: %v\n%s", rel, err, out)
	}
	if err := env.kube.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Logf("deleting namespace %s: %v", ns, err)
	}
	waitFor(t, 3*time.Minute, "the release's processes to exit", func() error {
		for _, p := range env.kubelet.All() {
			select {
			case <-p.Exited:
			default:
				if p.Namespace == ns {
					return fmt.Errorf("%s still runs", p.Name)
				}
			}
		}
		return nil
	})
}
