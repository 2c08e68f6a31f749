// Command soak is `make soak`: an hour (--duration) of production churn on
// the local cluster (test/cluster, Karpenter's kwok provider), with apportion
// installed by its chart (2 replicas, leader election) as the chart suite
// installs it (test/e2e/chart: framework.Kubelet runs the chart's pods), and
// measured each minute.
//
//	go run ./test/soak --duration 10m --out /tmp/soak
//
// It deploys Deployments, StatefulSets, Jobs and CronJobs (strategy
// annotations, PlacementPolicies and ClusterPlacementPolicies), then churns
// them, each kind of event on its own seeded schedule: rollouts, scaling,
// Jobs recreated, spot interruptions (NodeClaims deleted), a NodePool's
// limits lowered and raised, the placement leader's pod deleted, the leader
// frozen (SIGSTOP, then SIGCONT), `helm upgrade` rolling both replicas, and
// policies created, changed and deleted. Each minute it prints one line and
// appends a row to OUT/minutes.csv (and OUT/minutes.json): settled
// workloads within quota by the labels of their pods' nodes, pods admitted
// without a decision, pods Pending past their capacity timeout and why, the
// API server's pod writes per pod created, and each replica's RSS, heap and
// goroutines. At the end it prints the summary against the targets, writes
// OUT/summary.json and OUT/soak.png, and exits 1 when a target failed.
//
// It needs root (a private network namespace) and the tools `make tools`
// builds.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/apportion-dev/apportion/test/framework"
)

// options are the command line.
type options struct {
	duration time.Duration
	out      string
	seed     int64
	interval time.Duration
	warmUp   time.Duration
	timeout  time.Duration
	scale    int
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", time.Hour, "how long the churn runs, after the set-up")
	fs.StringVar(&o.out, "out", "soak-out", "folder for minutes.csv, minutes.json, summary.json and soak.png (created)")
	fs.Int64Var(&o.seed, "schedule", 1, "number of the churn's schedules and choices: the same number replays the same events in the same order")
	fs.DurationVar(&o.interval, "interval", time.Minute, "time between two samples")
	fs.DurationVar(&o.warmUp, "warm-up", 0, "samples left out of the RSS and goroutine growth check (0: a fifth of --duration)")
	fs.DurationVar(&o.timeout, "timeout", 0, "deadline of the whole run, set-up and teardown included (0: --duration + 25m)")
	fs.IntVar(&o.scale, "scale", 1, "multiply the workloads' replicas by this")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.duration < 2*o.interval || o.interval <= 0:
		return o, fmt.Errorf("--duration (%s) must cover at least two --interval (%s)", o.duration, o.interval)
	case o.out == "":
		return o, errors.New("--out must name a folder")
	case o.scale < 1:
		return o, errors.New("--scale must be at least 1")
	}
	if o.warmUp == 0 {
		o.warmUp = o.duration / 5
	}
	if o.timeout == 0 {
		o.timeout = o.duration + 25*time.Minute
	}
	return o, nil
}

func main() {
	os.Exit(framework.Command[options]{Name: "soak", Parse: parseOptions, Run: run,
		Timeout: func(o options) time.Duration { return o.timeout }}.Main(os.Args[1:]))
}

// say prints one progress line with the time of day.
func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s soak: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
