package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// secureServingArgs are the flags of a component's own HTTPS endpoint
// (/healthz): on 127.0.0.1, with a certificate from the cluster's CA so the
// health check verifies it, and a cert-dir in the run folder (the default is
// /var/run/kubernetes).
func (c *Cluster) secureServingArgs(name string, port int) []string {
	return []string{
		"--kubeconfig=" + c.kubeconfig,
		// Delegated authn/authz: without them every request is anonymous
		// and the logs fill with warnings.
		"--authentication-kubeconfig=" + c.kubeconfig,
		"--authorization-kubeconfig=" + c.kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.dir, name),
		"--tls-cert-file=" + c.pkiPath(name+".crt"),
		"--tls-private-key-file=" + c.pkiPath(name+".key"),
		"--leader-elect=false",
	}
}

// startControllerManager runs kube-controller-manager: without it there are
// no ReplicaSets, no Pods from Deployments and no default ServiceAccount
// (so no Pod can be created at all).
func (c *Cluster) startControllerManager(ctx context.Context) error {
	args := append(c.secureServingArgs("controller-manager", c.ports.controllerManager),
		"--controllers=*",
		// kwok renews the fake nodes' Leases; on a loaded 2-core machine a
		// renewal can come late, and a node declared NotReady marks its
		// pods not ready, which changes the ReplicaSet controller's
		// choice of the pods to delete and the Services' endpoints. No
		// suite tests node failure.
		"--node-monitor-grace-period=5m",
		"--node-startup-grace-period=5m",
		"--service-account-private-key-file="+c.pkiPath("sa.key"),
		"--root-ca-file="+c.pkiPath("ca.crt"),
		"--cluster-signing-cert-file="+c.pkiPath("ca.crt"),
		"--cluster-signing-key-file="+c.pkiPath("ca.key"),
	)
	args = append(args, c.opts.ControllerManagerFlags...)
	p, err := c.launch("kube-controller-manager", defaultStopGrace, nil, "kube-controller-manager", args...)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, p, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports.controllerManager), false)
}

// startScheduler runs kube-scheduler, which binds pods to the nodes
// Karpenter creates.
func (c *Cluster) startScheduler(ctx context.Context) error {
	args := append(c.secureServingArgs("scheduler", c.ports.scheduler), c.opts.SchedulerFlags...)
	p, err := c.launch("kube-scheduler", defaultStopGrace, nil, "kube-scheduler", args...)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, p, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports.scheduler), false)
}

// waitDefaultServiceAccount waits for the controller-manager's token
// controller: until default/default exists, creating a Pod fails.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	return c.waitFor(ctx, "ServiceAccount default/default", c.process("kube-controller-manager"), func(ctx context.Context) error {
		return c.client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "default"}, &corev1.ServiceAccount{})
	})
}
