package main

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

// status prints the table again for the running demo, e.g. after
// `kubectl scale`: the cluster's split next to the plan at the Deployments'
// current replicas. It reaches the cluster from the host, through the
// kubeconfig `up` printed.
func status(l layout) error {
	kubeconfig, err := cluster.KubeconfigDetached(l.state)
	if err != nil {
		return errors.New("no demo cluster is running (start one with make demo)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	// Importing Karpenter's API package registers its kinds in client-go's
	// scheme, which is all the table reads.
	kube, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return fmt.Errorf("connecting to the demo cluster: %w", err)
	}
	workloads, err := readExamples(framework.RepoRoot())
	if err != nil {
		return err
	}
	return printTable(context.Background(), kube, workloads)
}
