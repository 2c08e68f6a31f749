package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/apportion-dev/apportion/test/cluster"
)

// down stops the demo agent (and with it apportion's pods' processes) and
// the demo cluster, and removes the state folder.
func down(l layout) error {
	_, err := cluster.KubeconfigDetached(l.state)
	running := err == nil
	if err := teardown(l); err != nil {
		return err
	}
	if running {
		fmt.Printf("demo: stopped; removed %s\n", l.state)
	} else {
		fmt.Println("demo: no demo cluster was running")
	}
	return nil
}

// teardown stops the demo agent and a detached cluster in the state
// folder, if any, removes the demo's own files and, when nothing else is
// left in it, the folder. The agent goes first: it stops the pods'
// processes, which the cluster's state does not list.
func teardown(l layout) error {
	if err := stopAgent(l); err != nil {
		return fmt.Errorf("stopping the demo agent: %w", err)
	}
	if err := cluster.StopDetached(l.state); err != nil {
		return fmt.Errorf("stopping the demo cluster: %w", err)
	}
	if err := stopLeftPods(l); err != nil {
		return err
	}
	if err := os.RemoveAll(l.own); err != nil {
		return fmt.Errorf("removing the demo's files: %w", err)
	}
	if err := os.Remove(l.state); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", l.state, err)
	}
	return nil
}
