package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/pkg/operator"
	"github.com/apportion-dev/apportion/pkg/split"
)

// cluster connects with the kube flags; the namespace is -n, else the
// context's, else "default"; "" with all.
func (k *kubeFlags) cluster(all bool) (*explain.Cluster, string, error) {
	cfg, namespace, err := k.connect(all)
	if err != nil {
		return nil, "", err
	}
	scheme, err := operator.Scheme()
	if err != nil {
		return nil, "", failed(err)
	}
	c, err := newClient(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", failed(fmt.Errorf("connecting to the cluster: %w", err))
	}
	cl, err := explain.NewCluster(c)
	if err != nil {
		return nil, "", failed(err)
	}
	return cl, namespace, nil
}

// readHint names what explain and status read, for a refused request.
const readHint = "explain and status read pods, nodes, Deployments, StatefulSets, ReplicaSets, Jobs, CronJobs, and Argo Rollouts and Workflows, NodePools and PlacementPolicies when served (get and list); nodes and NodePools are cluster-scoped: check with kubectl auth can-i list nodes"

// withRBACHint adds readHint to a Forbidden error.
func withRBACHint(err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%w (%s)", err, readHint)
	}
	return err
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

const explainLong = `Explains apportion's placement, from what the cluster holds now (read-only: get and
list on pods, nodes, the workloads, NodePools and PlacementPolicies).

For a pod: its decision (group, NodePool, how it was chosen, the pods per group counted
before it, the groups that were out of capacity), the group its node is in, its
architectures and where they come from, and a runtime-class profile's rewrite; then its
workload.

For a workload (a Job or Argo Workflow is split over its live pods): its strategy and
where it is written (an annotation, or which PlacementPolicy or ClusterPlacementPolicy,
and why that one), its mode, the split now by the labels of its Running pods' nodes next
to the quota at its replica count, the groups left out and why, why it is off its
strategy (drift), its decided, shadow, stray, fallback and waiting pods, and the groups
the next 10 pods would get. Per group, DESIRED is the quota method's count at the replica
count ("2 (cap 2)" for a group capped by max=2), RUNNING its Running pods by their
nodes' labels, QUOTA NOW the floor and ceiling of its ideal share at the Running count.

-o json (and yaml) names a group's numbers as plan -o json does: "desired", "cap",
"floor", "ceiling", "nodePool", "leftOut"; "actual" is RUNNING.`

const explainExample = `  # Why did this pod go where it is?
  apportion explain pod/web-7d4b9c5f6-x2x8k -n shop

  # A Deployment's split now against its strategy, as JSON
  apportion explain deployment/web -n shop -o json

  # As a kubectl plugin
  kubectl apportion explain statefulset/db`

func newExplain() *cobra.Command {
	kf := newKubeFlags()
	var output string
	cmd := &cobra.Command{
		Use:     "explain (pod|deployment|statefulset|replicaset|rollout|job|workflow)/NAME [-n NAMESPACE] [-o table|json|yaml]",
		Short:   "Explain where a pod went and why, or a workload's split against its strategy",
		Long:    explainLong,
		Example: explainExample,
		Args:    cobra.RangeArgs(1, 2),
		// The flags are in Use already.
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := explain.ParseRef(args, "x"); err != nil {
				return err // a usage error before any connection
			}
			cl, namespace, err := kf.cluster(false)
			if err != nil {
				return err
			}
			ref, _ := explain.ParseRef(args, namespace)
			ctx, cancel := signalContext()
			defer cancel()
			return runExplain(ctx, cl, ref, output, cmd.OutOrStdout())
		},
	}
	kf.add(cmd.Flags())
	addOutputFlag(cmd.Flags(), &output, outputTable, outputTable, outputJSON, outputYAML)
	return cmd
}

// runExplain reports on ref.
func runExplain(ctx context.Context, cl *explain.Cluster, ref explain.Ref, output string, w io.Writer) error {
	var report any
	var err error
	if ref.Kind == "Pod" {
		report, err = cl.Pod(ctx, ref.Namespace, ref.Name)
	} else {
		report, err = cl.Workload(ctx, ref)
	}
	switch {
	case errors.Is(err, explain.ErrUsage):
		return err
	case apierrors.IsNotFound(err):
		return failed(fmt.Errorf("%s not found in namespace %s", ref, ref.Namespace))
	case err != nil:
		return failed(withRBACHint(err))
	}
	if output != outputTable {
		return writeStructured(w, output, report)
	}
	if p, ok := report.(*explain.PodReport); ok {
		return writePod(w, p)
	}
	return writeWorkload(w, report.(*explain.WorkloadReport))
}

const statusLong = `Lists, one line each, the workloads apportion places (a strategy annotation, a
PlacementPolicy or a ClusterPlacementPolicy; -o wide names it) with their split: DESIRED is the quota method's count per group at the
replica count, DECIDED the live pods apportion placed in each group (in shadow mode: the
ones it would have placed), RUNNING the Running pods by the labels of their nodes. DRIFT
is ✓ when the Running split is within quota with every group served, ✗ with the first
reason otherwise, and - for shadow mode. Groups are named by their labels' values.`

const statusExample = `  # The workloads of the current namespace
  apportion status

  # Every namespace, with the strategies and NodePools
  apportion status -A -o wide`

func newStatus() *cobra.Command {
	kf := newKubeFlags()
	var all bool
	var output string
	cmd := &cobra.Command{
		Use:     "status [-n NAMESPACE | -A] [-o table|wide|json|yaml]",
		Short:   "List the placed workloads with their split against their strategy",
		Long:    statusLong,
		Example: statusExample,
		Args:    noArgs,
		// The flags are in Use already.
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, namespace, err := kf.cluster(all)
			if err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			reports, err := cl.Status(ctx, namespace)
			if err != nil {
				return failed(withRBACHint(err))
			}
			if output == outputJSON || output == outputYAML {
				if reports == nil {
					reports = []*explain.WorkloadReport{}
				}
				return writeStructured(cmd.OutOrStdout(), output, reports)
			}
			return writeStatus(cmd.OutOrStdout(), reports, output == outputWide)
		},
	}
	kf.add(cmd.Flags())
	addAllNamespaces(cmd.Flags(), &all, "the workloads of every namespace")
	addOutputFlag(cmd.Flags(), &output, outputTable, outputTable, outputWide, outputJSON, outputYAML)
	return cmd
}

// writeStatus writes the status table.
func writeStatus(w io.Writer, reports []*explain.WorkloadReport, wide bool) error {
	if len(reports) == 0 {
		_, err := fmt.Fprintln(w, "No placed workloads found.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "NAMESPACE\tWORKLOAD\tMODE\tREPLICAS\tGROUPS\tDESIRED\tDECIDED\tRUNNING\tDRIFT"
	if wide {
		header += "\tNODEPOOLS\tSOURCE\tSTRATEGY"
	}
	fmt.Fprintln(tw, header)
	for _, r := range reports {
		name := strings.ToLower(r.Kind) + "/" + r.Name
		if r.NotPlaced != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t-\t-\t-\t-\t✗ %s", r.Namespace, name, r.Mode, r.Replicas, clip(r.NotPlaced, 100))
			if wide {
				fmt.Fprintf(tw, "\t-\t%s\t%s", r.Source, r.Strategy)
			}
			fmt.Fprintln(tw)
			continue
		}
		var groups, desired, decided, running, pools []string
		for _, g := range r.Groups {
			groups = append(groups, shortGroup(g.Key))
			desired = append(desired, split.WithCap(g.Desired, g.Cap))
			if r.Mode == "shadow" {
				decided = append(decided, fmt.Sprint(g.Shadow))
			} else {
				decided = append(decided, fmt.Sprint(g.Decided))
			}
			running = append(running, fmt.Sprint(g.Actual))
			pools = append(pools, orDash(g.NodePool))
		}
		if r.Unmatched > 0 {
			running = append(running, fmt.Sprintf("+%d elsewhere", r.Unmatched))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s", r.Namespace, name, r.Mode, r.Replicas,
			strings.Join(groups, "/"), strings.Join(desired, "/"), strings.Join(decided, "/"), strings.Join(running, "/"), driftMark(r))
		if wide {
			fmt.Fprintf(tw, "\t%s\t%s\t%s", strings.Join(pools, "/"), r.Source, r.Strategy)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// shortGroup names a group by its labels' values: "on-demand" for
// karpenter.sh/capacity-type=on-demand.
func shortGroup(key string) string {
	if !strings.Contains(key, "=") {
		return key
	}
	var values []string
	for _, kv := range strings.Split(key, ",") {
		_, v, _ := strings.Cut(kv, "=")
		values = append(values, v)
	}
	return strings.Join(values, ",")
}

// clip shortens s to n runes for a table cell.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func driftMark(r *explain.WorkloadReport) string {
	switch {
	case r.Mode == "shadow":
		return "-"
	case len(r.Drift) > 0:
		return "✗ " + clip(r.Drift[0], 100)
	default:
		return "✓"
	}
}

// writeWorkload writes a workload's report as text.
func writeWorkload(w io.Writer, r *explain.WorkloadReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Workload:\t%s %s/%s\n", r.Kind, r.Namespace, r.Name)
	if r.Strategy != "" {
		fmt.Fprintf(tw, "Strategy:\t%s\n", r.Strategy)
		fmt.Fprintf(tw, "  from:\t%s\n", r.Source)
	}
	if r.Why != "" {
		fmt.Fprintf(tw, "  why:\t%s\n", r.Why)
	}
	mode := r.Mode
	if r.ModeSource != "" {
		mode += " (" + r.ModeSource + ")"
	} else {
		mode += " (the install's default)"
	}
	if r.Mode == "shadow" {
		mode += ": decisions are recorded on the pods, not applied"
	}
	fmt.Fprintf(tw, "Mode:\t%s\n", mode)
	if r.NotPlaced != "" {
		fmt.Fprintf(tw, "Not placed:\t%s\n", r.NotPlaced)
		fmt.Fprintf(tw, "Pods:\t%d live\n", r.Pods.Live)
		return tw.Flush()
	}
	fmt.Fprintf(tw, "Revision:\t%s\n", orDash(r.Revision))
	fmt.Fprintf(tw, "Replicas:\t%d (%d running)\n", r.Replicas, r.Running)
	switch {
	case r.Mode == "shadow":
		fmt.Fprintf(tw, "Split:\tnot applied (shadow mode); WOULD DECIDE is what apportion would have done\n")
	case len(r.Drift) == 0:
		fmt.Fprintf(tw, "Split:\twithin quota, every group served\n")
	default:
		fmt.Fprintf(tw, "Split:\toff its strategy\n")
		for _, d := range r.Drift {
			fmt.Fprintf(tw, "  drift:\t%s\n", d)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	decidedHeader := "DECIDED"
	if r.Mode == "shadow" {
		decidedHeader = "WOULD DECIDE"
	}
	fmt.Fprintf(tw, "GROUP\tNODEPOOL\tDESIRED\tRUNNING\tQUOTA NOW\t%s\tSTRAYS\tLEFT OUT\n", decidedHeader)
	for _, g := range r.Groups {
		quota := fmt.Sprint(g.Min)
		if g.Max != g.Min {
			quota += "-" + fmt.Sprint(g.Max)
		}
		decided := g.Decided
		if r.Mode == "shadow" {
			decided = g.Shadow
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", g.Key, orDash(g.NodePool), split.WithCap(g.Desired, g.Cap), g.Actual, quota, decided, g.Strays, orDash(clip(g.LeftOut, 120)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := r.Pods
	fmt.Fprintf(tw, "Pods:\t%d live: %d decided, %d shadow, %d waiting, %d strays, %d beyond caps, %d fallback, %d of other revisions\n",
		p.Live, p.Decided, p.Shadow, p.Waiting, p.Strays, p.BeyondCaps, p.Fallback, p.OtherRevisions)
	if r.Unmatched > 0 {
		fmt.Fprintf(tw, "Elsewhere:\t%d running on nodes of no group\n", r.Unmatched)
	}
	if r.BeyondCaps > 0 {
		fmt.Fprintf(tw, "Beyond caps:\t%d at %d replicas: every group with a weight is at its cap, placed without a group\n", r.BeyondCaps, r.Replicas)
	}
	next := make([]string, len(r.Next))
	for i, k := range r.Next {
		next[i] = shortGroup(k)
	}
	fmt.Fprintf(tw, "Next %d pods:\t%s\n", len(next), orDash(strings.Join(next, ", ")))
	return tw.Flush()
}

// writePod writes a pod's report as text, then its workload's.
func writePod(w io.Writer, r *explain.PodReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	where := r.Phase
	if r.Node != "" {
		where += " on node " + r.Node
	}
	fmt.Fprintf(tw, "Pod:\t%s/%s (%s)\n", r.Namespace, r.Name, where)
	fmt.Fprintf(tw, "State:\t%s\n", r.State)
	if r.Why != "" {
		fmt.Fprintf(tw, "  why:\t%s\n", r.Why)
	}
	if d := r.Decision; d != nil {
		if d.Group != "" {
			fmt.Fprintf(tw, "Group:\t%s\n", d.Group)
		}
		fmt.Fprintf(tw, "NodePool:\t%s\n", orDash(d.NodePool))
		if d.Reason != "" {
			fmt.Fprintf(tw, "Reason:\t%s\n", d.Reason)
		}
		if len(d.Seen) > 0 {
			fmt.Fprintf(tw, "Counted before it:\t%s (revision %s)\n", describeCounts(d.Seen), orDash(d.Revision))
		}
		if len(d.Strays) > 0 {
			fmt.Fprintf(tw, "  of which strays:\t%s\n", describeCounts(d.Strays))
		}
		if d.Strategy != "" {
			current := "the workload's strategy now"
			if !d.Current {
				current = "not the workload's strategy now"
			}
			fmt.Fprintf(tw, "Strategy:\t%s (%s)\n", d.Strategy, current)
		}
		for _, o := range d.Out {
			fmt.Fprintf(tw, "Out of capacity:\t%s\n", o)
		}
	}
	if r.Node != "" {
		fmt.Fprintf(tw, "Node's group:\t%s\n", orDash(r.NodeGroup))
	}
	archs := "any"
	if len(r.Architectures) > 0 {
		archs = strings.Join(r.Architectures, ", ")
	}
	fmt.Fprintf(tw, "Architectures:\t%s\n  from:\t%s\n", archs, r.ArchitecturesFrom)
	fmt.Fprintf(tw, "Images:\t%s\n", strings.Join(r.Images, ", "))
	if r.Profile != nil {
		fmt.Fprintf(tw, "Profile:\truntime class %s replaced: %s\n", r.Profile.RuntimeClass, r.Profile.Original)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Workload == nil {
		return nil
	}
	fmt.Fprintln(w)
	return writeWorkload(w, r.Workload)
}

func describeCounts(counts []explain.GroupCount) string {
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%s %d", shortGroup(c.Group), c.Count)
	}
	return strings.Join(parts, ", ")
}
