// Command benchscale is `make bench-scale`: a burst of N workloads × R
// replicas, all scaled from zero at once on the local cluster (test/cluster,
// Karpenter's kwok provider), once without apportion and once with it, from
// no spare capacity each time. It prints what the burst cost: time to every
// pod Running, decisions per second, gate waits, pods released undecided, API
// requests and CPU per placed pod, heap per cached pod, the pod webhook's
// latency, and the split of every workload checked against its quota by the
// labels of its pods' nodes (exit status 1 when one is off).
//
//	go run ./test/benchscale --workloads 20 --replicas 100 --json out.json
//
// With --batch it runs one Job with apportion instead, and checks its live
// pods against the quota every second until the Job completes.
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
	"strings"
	"time"

	"github.com/apportion-dev/apportion/test/framework"
)

// options are the command line.
type options struct {
	workloads     int
	replicas      int
	apportion     int
	apportionArgs string
	gateTimeout   time.Duration
	runTimeout    time.Duration
	timeout       time.Duration
	jsonFile      string
	cpuProfile    string
	profileFor    time.Duration
	only          string
	pinned        bool
	pinnedGated   bool
	pinnedDecided bool
	batch         bool
	jobPods       int
	jobParallel   int
}

// runs reports whether the burst of mode is run.
func (o options) runs(mode string) bool {
	if o.only != "" {
		return o.only == mode
	}
	return mode != modePinned || o.pinned
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("benchscale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.workloads, "workloads", 100, "Deployments, strategies in turn: capacity type (base 2 on-demand, rest 1:3 spot), architecture 1:1, zones 2:1:1")
	fs.IntVar(&o.replicas, "replicas", 100, "replicas of each Deployment")
	fs.IntVar(&o.apportion, "replicas-apportion", 2, "`apportion webhook` replicas behind the balancer (leader election on)")
	fs.StringVar(&o.apportionArgs, "apportion-args", "", "extra flags for every apportion replica, separated by spaces")
	fs.DurationVar(&o.gateTimeout, "gate-timeout", 30*time.Second, "the replicas' --gate-timeout")
	fs.DurationVar(&o.runTimeout, "run-timeout", 15*time.Minute, "longest wait for one burst's pods")
	fs.DurationVar(&o.timeout, "timeout", 45*time.Minute, "deadline of the whole benchmark, cluster start and stop included")
	fs.StringVar(&o.jsonFile, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.cpuProfile, "cpu-profile", "", "write a CPU profile of the placement leader, taken during the burst with apportion, to this file")
	fs.DurationVar(&o.profileFor, "cpu-profile-duration", 30*time.Second, "length of the --cpu-profile")
	fs.StringVar(&o.only, "only", "", `run one burst only: "with" or "without" apportion, or "pinned" (the same splits by nodeSelector, without apportion)`)
	fs.BoolVar(&o.pinned, "pinned", true, "also run the burst pinned by hand: each workload as one Deployment per group, with the group's labels as nodeSelector and its count of the quota, without apportion (what the placement itself costs the control plane)")
	fs.BoolVar(&o.pinnedGated, "pinned-gated", false, "hold the pinned burst's pods by a scheduling gate in their template, which the bench removes from each pod by one patch as soon as it sees it: the path apportion's pods take, with no webhook and no decision (what gating alone costs the control plane)")
	fs.BoolVar(&o.pinnedDecided, "pinned-decision", false, "with --pinned-gated (implied), the bench's patch that removes the gate also writes apportion's whole decision for the pod's group, as apportion's placement writes it (the annotations, the node affinity with the group's labels, architectures and NodePool, the NodePool's tolerations, the deletion cost, signed), and the pods have no nodeSelector: what the decision's content costs the control plane, without the webhook or apportion's own work")
	fs.BoolVar(&o.batch, "batch", false, "instead of the bursts, run one Job with apportion (capacity spread) and check its live pods against the quota every second")
	fs.IntVar(&o.jobPods, "job-pods", 2000, "with --batch, the Job's completions")
	fs.IntVar(&o.jobParallel, "job-parallelism", 200, "with --batch, the Job's parallelism")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.pinnedGated = o.pinnedGated || o.pinnedDecided
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.workloads < 1 || o.replicas < 1:
		return o, errors.New("--workloads and --replicas must be at least 1")
	case o.jobPods < 1 || o.jobParallel < 1:
		return o, errors.New("--job-pods and --job-parallelism must be at least 1")
	case o.apportion < 1:
		return o, errors.New("--replicas-apportion must be at least 1")
	case o.only != "" && o.only != modeWith && o.only != modeWithout && o.only != modePinned:
		return o, fmt.Errorf(`--only must be "with", "without" or "pinned", got %q`, o.only)
	}
	return o, nil
}

// extraArgs are --apportion-args as a list.
func (o options) extraArgs() []string { return strings.Fields(o.apportionArgs) }

func main() {
	os.Exit(framework.Command[options]{Name: "benchscale", Parse: parseOptions, Run: run,
		Timeout: func(o options) time.Duration { return o.timeout }}.Main(os.Args[1:]))
}

// say prints one progress line with the time of day.
func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s benchscale: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
