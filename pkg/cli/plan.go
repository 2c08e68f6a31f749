package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

const planLong = `Previews where pods 1..N of a workload go under a strategy, with no cluster: the group
of each pod, the count per group and each group's ideal share, as the webhook decides
them for a workload scaled up one pod at a time. --replicas is at most 1000000.

--strategy and --replicas preview one strategy. -f previews every workload of manifests
(a file, "-" for stdin, or a directory: every *.yaml, *.yml and *.json file under it,
subdirectories included), e.g. the output of helm template: Deployments, StatefulSets,
ReplicaSets, Argo Rollouts, Jobs, CronJobs (as one of their Jobs) and Argo Workflows,
each with the strategy the webhook would give it: its own annotation
(apportion.dev/strategy, custom-pod-schedule-strategy or CustomPodScheduleStrategy, on
the workload or its pod template), else the oldest
PlacementPolicy of its namespace that targets it, else the ClusterPlacementPolicy of
highest priority that covers its namespace (policies without a creationTimestamp are as
old as each other: the first by name wins). Each workload is printed with where its
strategy comes from, its mode and its split at its spec.replicas (--replicas replaces it
for every workload), or why it would not be placed. Documents of other kinds are
skipped and counted on stderr; a document that does not parse is an error. Objects
with no namespace are in --namespace. A cluster policy selects namespaces by their
labels: from Namespace documents, or --namespace-labels NAMESPACE=KEY=VALUE,... which
gives a namespace's labels in place of its document's (NAMESPACE= for none); a
namespace neither gives has only kubernetes.io/metadata.name. With --strategy, -f
instead reads the one workload carrying a strategy, for its replicas and pod template.

With --nodepools (karpenter.sh/v1 NodePools, e.g. kubectl get nodepools -o yaml) each
group is mapped to the first NodePool, in Karpenter's weight order, that provides its
labels and the workload's own constraints (tainted pools only with apportion.dev/tolerate:
"true"); groups no NodePool serves are left out and the others share their part.
--strict makes a group left out an error (exit status 1), for CI pipelines.

The table's columns are named as the JSON keys: per group BASE, WEIGHT, IDEAL (its ideal
share), DESIRED (its pods; "2 (cap 2)" for a group capped by max=2) and NODEPOOL; -o wide
adds FLOOR and CEILING (the ideal share's floor and ceiling, which DESIRED stays within),
TOLERATIONS (with --nodepools) and the order of every pod (with -f, of the first 1000).

-o json (and yaml, the same keys): "strategy", "replicas", "groups" (group keys in
strategy order), "sequence" (0-based index into groups of the group of each pod 1..N, -1
for a pod beyond caps), "counts" (group key -> pods), "beyondCaps" (pods past every
group's cap, when some are), "details" (per group: "key", "labels", "base", "weight",
"cap", "ideal", "floor", "ceiling", "desired", and with --nodepools "nodePool" and
"tolerations", or "leftOut": why no NodePool serves it). With -f: {"workloads": [...]},
one entry per workload with "kind", "namespace", "name", "replicas", "source", "mode",
"notPlaced" or "error", and the keys above, "sequence" holding the first 1000 pods only
("sequenceTruncated": true when there are more; --strategy previews one workload with
all of them).`

const planExample = `  # Two pods on-demand, then one on-demand for every three spot, 10 pods
  apportion plan --strategy 'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3' --replicas 10

  # Every workload of a chart under the cluster's policies, as JSON
  { helm template web ./chart -n shop; kubectl get placementpolicies,clusterplacementpolicies -A -o yaml; } |
    apportion plan -f - -n shop --namespace-labels shop=team=web -o json

  # A directory of manifests against the cluster's NodePools; fail if a group has no NodePool
  kubectl get nodepools -o yaml > pools.yaml
  apportion plan -f manifests/ --nodepools pools.yaml --strict`

// planFlags are the options of `apportion plan`.
type planFlags struct {
	strategy  string
	replicas  decimalValue
	file      string
	nodePools string
	output    string
	strict    bool
	// namespace and namespaceLabels place the -f manifests: the namespace
	// of those that name none, and namespaces' labels ("ns=k=v,k=v").
	namespace       string
	namespaceLabels []string
	// strategySet is whether --strategy was given, even empty.
	strategySet bool
}

// decimalValue is --replicas: decimal only (pflag's int reads "010" as
// octal and "0x10" as hex), at most plan.MaxReplicas.
type decimalValue struct {
	n   int
	set bool
}

func (d *decimalValue) String() string { return strconv.Itoa(d.n) }
func (d *decimalValue) Type() string   { return "int" }
func (d *decimalValue) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("must be a non-negative integer")
	}
	if err != nil || n > plan.MaxReplicas {
		return fmt.Errorf("must be at most %d", plan.MaxReplicas)
	}
	d.n, d.set = int(n), true
	return nil
}

func newPlan(stdin io.Reader) *cobra.Command {
	var o planFlags
	cmd := &cobra.Command{
		Use:     "plan (--strategy STRATEGY --replicas N | -f FILE|DIR|- [-n NAMESPACE] [--namespace-labels NS=K=V,...]) [--nodepools FILE] [--strict] [-o table|wide|json|yaml]",
		Short:   "Preview a strategy's split of pods across groups, offline",
		Long:    planLong,
		Example: planExample,
		Args:    noArgs,
		// The flags are in Use already.
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.strategySet = cmd.Flags().Changed("strategy")
			return o.run(stdin, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.strategy, "strategy", "", "the strategy, e.g. 'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3'")
	fs.Var(&o.replicas, "replicas", fmt.Sprintf("number of pods, 0 to %d; default: the -f workload's spec.replicas", plan.MaxReplicas))
	fs.StringVarP(&o.file, "filename", "f", "", `manifests: a file, a directory (every *.yaml, *.yml and *.json under it, subdirectories included) or "-" (stdin)`)
	fs.StringVarP(&o.namespace, "namespace", "n", metav1.NamespaceDefault, "with -f: the namespace of the objects that name none")
	fs.StringArrayVar(&o.namespaceLabels, "namespace-labels", nil, "with -f: a namespace's labels, NAMESPACE=KEY=VALUE[,KEY=VALUE...], in place of its Namespace document's (repeatable)")
	fs.StringVar(&o.nodePools, "nodepools", "", `karpenter.sh/v1 NodePool manifests ("-": stdin)`)
	fs.BoolVar(&o.strict, "strict", false, "exit 1 when a group is left out because no NodePool serves it (needs --nodepools)")
	addOutputFlag(fs, &o.output, outputTable, outputTable, outputWide, outputJSON, outputYAML)
	return cmd
}

func (o *planFlags) run(stdin io.Reader, stdout, stderr io.Writer) error {
	if err := o.check(); err != nil {
		return err
	}
	if o.file != "" && !o.strategySet {
		return o.runManifests(stdin, stdout, stderr)
	}
	in, err := o.input(stdin)
	if err != nil {
		return err
	}
	s, err := strategy.Parse(in.strategy)
	if err != nil {
		if in.source != "" {
			return fmt.Errorf("%s: %w", in.source, err)
		}
		return err
	}
	opts := plan.Options{Pod: in.pod}
	if o.nodePools != "" {
		nps, err := readInput(o.nodePools, stdin, catalog.ReadNodePools)
		if err != nil {
			return fmt.Errorf("%s: %w", o.nodePools, err)
		}
		opts.Catalog = catalog.New(nps)
	}
	// The sequence is written as the engine steps through it: held
	// nowhere, whatever --replicas.
	res, err := plan.Summarize(s, in.replicas, opts)
	if o.strict && errors.Is(err, plan.ErrNoGroupServed) {
		return failed(fmt.Errorf("--strict: %w", err))
	} else if err != nil {
		return err
	}
	res.Source = in.source
	switch o.output {
	case outputJSON:
		err = res.WriteJSON(stdout)
	case outputYAML:
		err = res.WriteYAML(stdout)
	case outputWide:
		err = res.WriteWide(stdout)
	default:
		err = res.WriteTable(stdout)
	}
	if err != nil {
		return failedIf(err)
	}
	if o.strict {
		return leftOut(res)
	}
	return nil
}

// runManifests previews every workload of the -f manifests under the
// policies among them.
func (o *planFlags) runManifests(stdin io.Reader, stdout, stderr io.Writer) error {
	nsLabels, err := parseNamespaceLabels(o.namespaceLabels)
	if err != nil {
		return err
	}
	m := plan.NewManifests(o.namespace)
	if o.file == "-" {
		err = m.Read(stdin, "stdin")
	} else {
		err = m.ReadPath(o.file)
	}
	if err != nil {
		return err
	}
	if len(m.Workloads) == 0 {
		return fmt.Errorf("%s: %w", o.file, plan.ErrNoWorkload)
	}
	for ns, l := range nsLabels {
		m.Namespaces[ns] = l
	}
	var cat *catalog.Catalog
	if o.nodePools != "" {
		nps, err := readInput(o.nodePools, stdin, catalog.ReadNodePools)
		if err != nil {
			return fmt.Errorf("%s: %w", o.nodePools, err)
		}
		cat = catalog.New(nps)
	}
	replicas := -1
	if o.replicas.set {
		replicas = o.replicas.n
	}
	previews, err := m.Preview(replicas, cat)
	if err != nil {
		return failed(err)
	}
	if line := m.SkippedLine(); line != "" {
		fmt.Fprintln(stderr, line)
	}
	switch o.output {
	case outputJSON:
		err = plan.WritePreviewsJSON(stdout, previews)
	case outputYAML:
		err = plan.WritePreviewsYAML(stdout, previews)
	default:
		err = plan.WritePreviews(stdout, previews, o.output == outputWide)
	}
	if err != nil {
		return failedIf(err)
	}
	if bad := plan.Failures(previews); len(bad) > 0 {
		// Invalid input, as for one workload: exit status 2.
		return fmt.Errorf("%d of %d workloads have no preview: %s", len(bad), len(previews), strings.Join(bad, "; "))
	}
	if !o.strict {
		return nil
	}
	var out []string
	for i := range previews {
		if p := &previews[i]; p.Result != nil {
			for _, g := range p.LeftOut() {
				out = append(out, p.String()+" "+g)
			}
		}
	}
	if len(out) > 0 {
		return failed(fmt.Errorf("--strict: %d groups left out, no NodePool serves them: %s", len(out), strings.Join(out, "; ")))
	}
	return nil
}

// parseNamespaceLabels reads --namespace-labels: NAMESPACE=KEY=VALUE,...
// (NAMESPACE= for none); a namespace given twice gets both label sets.
func parseNamespaceLabels(values []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, v := range values {
		ns, rest, ok := strings.Cut(v, "=")
		if !ok || ns == "" {
			return nil, fmt.Errorf("--namespace-labels %q: want NAMESPACE=KEY=VALUE[,KEY=VALUE...]", v)
		}
		if out[ns] == nil {
			out[ns] = map[string]string{}
		}
		if rest == "" {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("--namespace-labels %q: %q is not KEY=VALUE", v, kv)
			}
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				return nil, fmt.Errorf("--namespace-labels %q: label key %q: %s", v, k, strings.Join(errs, "; "))
			}
			if errs := validation.IsValidLabelValue(val); len(errs) > 0 {
				return nil, fmt.Errorf("--namespace-labels %q: label value %q: %s", v, val, strings.Join(errs, "; "))
			}
			out[ns][k] = val
		}
	}
	return out, nil
}

// leftOut is the --strict verdict: an error naming every group no NodePool
// serves.
func leftOut(res *plan.Result) error {
	out := res.LeftOut()
	if len(out) == 0 {
		return nil
	}
	return failed(fmt.Errorf("--strict: %d of %d groups left out, no NodePool serves them: %s", len(out), len(res.Details), strings.Join(out, "; ")))
}

// check checks the flags together.
func (o *planFlags) check() error {
	if o.file == "-" && o.nodePools == "-" {
		return errors.New("-f and --nodepools cannot both read stdin")
	}
	if o.strict && o.nodePools == "" {
		return errors.New("--strict needs --nodepools: without NodePools no group is left out")
	}
	if len(o.namespaceLabels) > 0 && (o.file == "" || o.strategySet) {
		return errors.New("--namespace-labels needs -f without --strategy: it places the workloads of manifests")
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
	in := planInput{strategy: o.strategy, replicas: o.replicas.n}
	if o.file == "" {
		if !o.strategySet {
			return in, fmt.Errorf("--strategy or -f is required (see %s plan --help)", Program)
		}
		if !o.replicas.set {
			return in, fmt.Errorf("--replicas is required without -f (see %s plan --help)", Program)
		}
		return in, nil
	}
	w, err := readWorkload(o.file, stdin)
	if err != nil {
		return in, fmt.Errorf("%s: %w", o.file, err)
	}
	in.pod = &corev1.Pod{ObjectMeta: w.Template.ObjectMeta, Spec: w.Template.Spec}
	if !o.strategySet {
		in.strategy, in.source = w.Strategy, w.String()+" "+w.Source
	}
	if !o.replicas.set {
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
