//go:build e2e

// Package profiles_test runs `apportion webhook` with a runtime-class
// profile (--runtime-class-profiles) against a real control plane with
// Karpenter's kwok provider (test/cluster), and checks the peer-pods rewrite
// end to end: the API server applies apportion's patch (with the RuntimeClass
// admission plugin's overhead), the rewritten pod is scheduled on the node
// that advertises the extended resource, a strategy on the same workload
// still places it, and pods of another runtime class are left as they were
// sent.
package profiles_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/framework"
)

const (
	// gateTimeout is the replica's --gate-timeout.
	gateTimeout = 30 * time.Second
	// kataRemote is the profiled runtime class; runc is another one.
	kataRemote = "kata-remote"
	runc       = "runc"
	// vmResource is the profile's extended resource; vmNodePool is the
	// NodePool of the node that advertises it (seed 004's strategy sends
	// its first pods to on-demand, and on-demand-amd64 is that group's
	// pool by weight).
	vmResource = corev1.ResourceName("kata.peerpods.io/vm")
	vmNodePool = "on-demand-amd64"
	// profilesFlag is the chart's RUNTIME_CLASS_PROFILES for kata-remote.
	profilesFlag = `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","quantity":"1","keepRequests":true}]`
)

// env is the cluster and the replica every test shares, and the node that
// advertises vmResource.
var env struct {
	framework.Suite
	vmNode string
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(framework.RunSuite(m, &env.Suite, framework.SuiteOptions{
		Name: "profiles", NodePools: true,
		Prepare:  func(ctx context.Context, _ *framework.Suite) error { return createRuntimeClasses(ctx) },
		Replicas: 1, GateTimeout: gateTimeout, Args: []string{"--runtime-class-profiles=" + profilesFlag},
		Ready: func(ctx context.Context, _ *framework.Suite) error { return advertiseVMs(ctx) },
	}))
}

// createRuntimeClasses creates kata-remote, with the peer-pods webhook's
// hack/rc.yaml overhead, and runc.
func createRuntimeClasses(ctx context.Context) error {
	for _, rc := range []*nodev1.RuntimeClass{
		{ObjectMeta: metav1.ObjectMeta{Name: kataRemote}, Handler: kataRemote, Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("120Mi"),
		}}},
		{ObjectMeta: metav1.ObjectMeta{Name: runc}, Handler: runc},
	} {
		if err := env.Kube.Create(ctx, rc); err != nil {
			return fmt.Errorf("creating RuntimeClass %s: %w", rc.Name, err)
		}
	}
	return nil
}

// advertiseVMs has Karpenter launch a node in vmNodePool (for a small
// anchor pod, in a namespace apportion ignores) and gives that node 10 of
// vmResource, as the peer-pods extended-resources DaemonSet would: the
// node's status capacity and allocatable. kwok keeps them (its stages only
// copy what the status already says), and Karpenter's kwok instance types
// offer no such resource, so this node is the only place peer pods fit.
func advertiseVMs(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vm-node", Labels: map[string]string{framework.IgnoreLabel: "true"}}}
	if err := env.Kube.Create(ctx, ns); err != nil {
		return err
	}
	anchor := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "anchor"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"karpenter.sh/nodepool": vmNodePool},
			Containers: []corev1.Container{{Name: "c", Image: "anchor", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")}}}},
		},
	}
	if err := env.Kube.Create(ctx, anchor); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := poll(wctx, func() error {
		if err := env.Kube.Get(wctx, client.ObjectKeyFromObject(anchor), anchor); err != nil {
			return err
		}
		if anchor.Spec.NodeName == "" {
			return fmt.Errorf("anchor pod not bound")
		}
		var node corev1.Node
		if err := env.Kube.Get(wctx, client.ObjectKey{Name: anchor.Spec.NodeName}, &node); err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", node.Name)
	})
	if err != nil {
		return fmt.Errorf("waiting for a node in %s: %w", vmNodePool, err)
	}
	env.vmNode = anchor.Spec.NodeName
	patch := []byte(fmt.Sprintf(`{"status":{"capacity":{%q:"10"},"allocatable":{%q:"10"}}}`, vmResource, vmResource))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: env.vmNode}}
	if err := env.Kube.Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return fmt.Errorf("advertising %s on %s: %w", vmResource, env.vmNode, err)
	}
	// It must still be there a few heartbeats later.
	time.Sleep(3 * time.Second)
	if err := env.Kube.Get(ctx, client.ObjectKey{Name: env.vmNode}, node); err != nil {
		return err
	}
	if q := node.Status.Allocatable[vmResource]; q.Value() != 10 {
		return fmt.Errorf("node %s allocatable %s = %s after the patch, want 10", env.vmNode, vmResource, q.String())
	}
	return nil
}

// poll calls check every 250ms until it returns nil or ctx ends.
func poll(ctx context.Context, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
