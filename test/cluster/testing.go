package cluster

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// stopBudget is how long before the test binary's -timeout StartForTest
// stops the cluster (a quarter of the time left, if that is less): the
// timeout panic runs no cleanup, so the cluster is stopped, and its logs
// printed, while that is still possible.
const stopBudget = 45 * time.Second

// StartForTest starts a cluster for t and stops it in t.Cleanup, printing
// the tail of every log first when the test failed. A start failure ends the
// test with t.Fatal.
func StartForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Progress == nil {
		opts.Progress = t.Output()
	}
	c, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("starting local cluster: %v", err)
	}
	var timer *time.Timer
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			budget := min(stopBudget, time.Until(deadline)/4)
			timer = time.AfterFunc(time.Until(deadline)-budget, func() {
				fmt.Fprintf(os.Stderr, "cluster: the test deadline (%s) is near: stopping the local cluster; last log lines:\n",
					deadline.Format(time.TimeOnly))
				c.DumpLogs(os.Stderr, 40)
				_ = c.Stop()
			})
		}
	}
	t.Cleanup(func() {
		if timer != nil {
			timer.Stop()
		}
		if t.Failed() {
			c.DumpLogs(t.Output(), 40)
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping local cluster: %v", err)
		}
	})
	return c
}
