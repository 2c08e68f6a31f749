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
// processes, which the cluster's state does not list; stopLeftPods stops
// those of an agent that could not.
func teardown(l layout) error {
	var errs []error
	if err := stopAgent(l); err != nil {
		errs = append(errs, fmt.Errorf("stopping the demo agent: %w", err))
	}
	// Before the cluster, so that they can still reach the API server
	// while they stop (and do not hold its shutdown up).
	if err := stopLeftPods(l); err != nil {
		errs = append(errs, err)
	}
	if err := cluster.StopDetached(l.state); err != nil {
		errs = append(errs, fmt.Errorf("stopping the demo cluster: %w", err))
	}
	if len(errs) > 0 {
		// The demo's files (logs included) stay for a look.
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(l.own); err != nil {
		return fmt.Errorf("removing the demo's files: %w", err)
	}
	if err := os.Remove(l.state); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", l.state, err)
	}
	return nil
}
