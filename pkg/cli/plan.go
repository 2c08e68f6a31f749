package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

const planUsage = `Usage: apportion plan --strategy SPEC --replicas N [-f workload.yaml] [--nodepools pools.yaml] [-o table|json]

Previews where pods 1..N of a workload go under a strategy, with no cluster.

  --strategy SPEC   the strategy, e.g.
                    'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3'
  --replicas N      number of pods (0..%d)
  -f FILE           read the strategy (any of apportion.dev/strategy, custom-pod-schedule-strategy,
                    CustomPodScheduleStrategy, on the workload or its pod template) and spec.replicas
                    from a Deployment, StatefulSet, ReplicaSet or Argo Rollout manifest ("-" for stdin);
                    --strategy and --replicas, when given, take precedence over the file
  --nodepools FILE  karpenter.sh/v1 NodePools (e.g. kubectl get nodepools -o yaml): each group is mapped
                    to the first NodePool, in Karpenter's weight order, that provides its labels and the
                    workload's own constraints; tainted pools only with apportion.dev/tolerate: "true";
                    groups no NodePool serves are left out and the others share their part
  -o FORMAT         table (default) or json

JSON output: "groups" (group keys in strategy order), "sequence" (0-based index into groups of
the group of each pod 1..N), "counts" (group key -> pods), "details" (per group: base, weight,
ideal share with its floor and ceiling, count, and with --nodepools the nodepool or why none).
`

// planFlags are the options of `apportion plan`.
type planFlags struct {
	strategy    string
	strategySet bool
	replicas    int
	replicasSet bool
	file        string
	nodePools   string
	output      string
}

func (o *planFlags) bind(fs *flag.FlagSet) {
	fs.Func("strategy", "the strategy", func(v string) error {
		o.strategy, o.strategySet = v, true
		return nil
	})
	// Decimal only: flag.Int would read "010" as octal and "0x10" as hex.
	fs.Func("replicas", "number of pods", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 31)
		if err != nil {
			return fmt.Errorf("must be a non-negative integer, got %q", v)
		}
		o.replicas, o.replicasSet = int(n), true
		return nil
	})
	fs.StringVar(&o.file, "f", "", "workload manifest")
	fs.StringVar(&o.file, "filename", "", "workload manifest")
	fs.StringVar(&o.nodePools, "nodepools", "", "NodePool manifests")
	fs.StringVar(&o.output, "o", "table", "output format")
	fs.StringVar(&o.output, "output", "table", "output format")
}

// Plan runs `apportion plan`.
func Plan(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "apportion plan: "+format+"\n", a...)
		return ExitUsage
	}
	var o planFlags
	if err := o.parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, planUsage, plan.MaxReplicas)
		return ExitOK
	} else if err != nil {
		return fail("%v", err)
	}
	in, err := o.input(stdin)
	if err != nil {
		return fail("%v", err)
	}
	s, err := strategy.Parse(in.strategy)
	if err != nil {
		if in.source != "" {
			return fail("%s: %v", in.source, err)
		}
		return fail("%v", err)
	}
	opts := plan.Options{Pod: in.pod}
	if o.nodePools != "" {
		nps, err := readInput(o.nodePools, stdin, catalog.ReadNodePools)
		if err != nil {
			return fail("%s: %v", o.nodePools, err)
		}
		opts.Catalog = catalog.New(nps)
	}
	res, err := plan.ComputeWith(s, in.replicas, opts)
	if err != nil {
		return fail("%v", err)
	}
	res.Source = in.source
	if o.output == "json" {
		err = res.WriteJSON(stdout)
	} else {
		err = res.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "apportion plan: writing output: %v\n", err)
		return ExitFailure
	}
	return ExitOK
}

// parse reads the flags and checks them; it returns flag.ErrHelp for -h.
func (o *planFlags) parse(args []string) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.bind(fs)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return err
	} else if err != nil {
		return fmt.Errorf("%w (see apportion plan -h)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see apportion plan -h)", fs.Arg(0))
	}
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("-o must be table or json, got %q", o.output)
	}
	if o.file == "-" && o.nodePools == "-" {
		return errors.New("-f and --nodepools cannot both read stdin")
	}
	return nil
}

// planInput is what the flags and the -f workload say to preview.
type planInput struct {
	strategy string
	replicas int
	// source names the workload the strategy came from; "" for --strategy.
	source string
	pod    *corev1.Pod
}

// input reads the -f workload, if any, under --strategy and --replicas,
// which take precedence over it.
func (o *planFlags) input(stdin io.Reader) (planInput, error) {
	in := planInput{strategy: o.strategy, replicas: o.replicas}
	if o.file == "" {
		if !o.strategySet {
			return in, errors.New("--strategy or -f is required (see apportion plan -h)")
		}
		if !o.replicasSet {
			return in, errors.New("--replicas is required without -f (see apportion plan -h)")
		}
		return in, nil
	}
	w, err := readWorkload(o.file, stdin)
	if err != nil {
		return in, fmt.Errorf("%s: %w", o.file, err)
	}
	in.pod = &corev1.Pod{ObjectMeta: w.Template.ObjectMeta, Spec: w.Template.Spec}
	if !o.strategySet {
		in.strategy, in.source = w.Strategy, w.String()+" "+w.Source.String()
	}
	if !o.replicasSet {
		// An unset spec.replicas means 1, as the API server defaults it.
		in.replicas = 1
		if w.Replicas != nil {
			in.replicas = int(*w.Replicas)
		}
	}
	return in, nil
}

func readWorkload(path string, stdin io.Reader) (*plan.Workload, error) {
	return readInput(path, stdin, plan.ReadWorkload)
}

// readInput opens path ("-" is stdin) and hands it to read.
func readInput[T any](path string, stdin io.Reader, read func(io.Reader) (T, error)) (T, error) {
	if path == "-" {
		return read(stdin)
	}
	var zero T
	f, err := os.Open(path)
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return zero, pe.Err // the path is already in the message
	} else if err != nil {
		return zero, err
	}
	defer func() { _ = f.Close() }()
	return read(f)
}
