package main

import (
	"context"
	"errors"

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
	kube, err := hostClient(kubeconfig)
	if err != nil {
		return err
	}
	workloads, err := readExamples(framework.RepoRoot())
	if err != nil {
		return err
	}
	return printTable(context.Background(), kube, workloads)
}
