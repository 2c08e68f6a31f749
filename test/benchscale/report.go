package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
)

// report prints the results as tables.
func report(w io.Writer, res *result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if res.Batch != nil {
		reportBatch(tw, res)
		return flush(tw)
	}
	fmt.Fprintf(tw, "\nBurst: %d workloads × %d replicas = %d pods, scaled from 0 at once, from no spare capacity; %d apportion replica(s)\n",
		res.Workloads, res.Replicas, res.Pods, res.ApportionReplicas)
	for _, s := range res.Strategies {
		fmt.Fprintf(tw, "  strategy in turn: %s\n", s)
	}
	fmt.Fprintln(tw, "\n\twithout apportion\tpinned by hand\twith apportion\twith/without\twith/pinned")
	row := func(name string, get func(*burstResult) float64, unit string, ratio bool) {
		a, p, b := value(res.Without, get), value(res.Pinned, get), value(res.With, get)
		ratioOf := func(x, y float64) string {
			if ratio && x > 0 && y > 0 {
				return fmt.Sprintf("%.2f", x/y)
			}
			return "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, num(a, unit), num(p, unit), num(b, unit), ratioOf(b, a), ratioOf(b, p))
	}
	row("every pod Running after", func(r *burstResult) float64 { return r.ToRunning }, "s", true)
	row("every pod scheduled after", func(r *burstResult) float64 { return r.ToScheduled }, "s", true)
	row("every pod decided after", func(r *burstResult) float64 { return r.ToDecided }, "s", false)
	row("decisions per second", func(r *burstResult) float64 { return r.DecisionsPerSecond }, "/s", false)
	row("longest gate wait (pods: seen to decided)", func(r *burstResult) float64 { return r.MaxGateWait }, "s", false)
	row("longest create to PodScheduled (1 s resolution)", func(r *burstResult) float64 { return r.MaxCreateToScheduled }, "s", true)
	fmt.Fprintf(tw, "reached\t%s\t%s\t%s\t\t\n", reached(res.Without), reached(res.Pinned), reached(res.With))
	reportCPU(tw, res)
	if res.Cost != nil {
		reportCost(tw, res.With, res.Cost)
	}
	reportSplits(tw, res)
	if res.CPUProfile != "" {
		fmt.Fprintf(tw, "\nCPU profile of the leader during the burst: %s (go tool pprof %s)\n", res.CPUProfile, res.CPUProfile)
	}
	return flush(tw)
}

func flush(tw *tabwriter.Writer) error {
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

func value(r *burstResult, get func(*burstResult) float64) float64 {
	if r == nil {
		return math.NaN()
	}
	return get(r)
}

// num prints v with its unit; 0 and NaN (not reached, not run) as "-".
func num(v float64, unit string) string {
	switch {
	case math.IsNaN(v) || v == 0:
		return "-"
	case math.IsInf(v, 1):
		return "+Inf"
	case unit == "s" && v < 1:
		return fmt.Sprintf("%.0fms", v*1000)
	case unit == "s":
		return fmt.Sprintf("%.1fs", v)
	default:
		return fmt.Sprintf("%.1f%s", v, unit)
	}
}

func reached(r *burstResult) string {
	switch {
	case r == nil:
		return "not run"
	case r.Reached == "":
		return fmt.Sprintf("NOT every pod scheduled (%d pods)", r.Pods)
	case r.Reached == "scheduled":
		return "every pod scheduled, NOT every pod Running"
	default:
		return "every pod Running"
	}
}

// reportCost prints what the replicas spent on the burst with apportion.
func reportCost(tw io.Writer, with *burstResult, c *apportionCost) {
	fmt.Fprintf(tw, "\nApportion during the burst (%d pods placed; metrics of every replica, after minus before)\n", c.Placed)
	fmt.Fprintf(tw, "gate wait (histogram)\tp50 <= %s\tp99 <= %s\tmax <= %s\n",
		bound(c.GateWait.Quantile(0.5)), bound(c.GateWait.Quantile(0.99)), bound(c.GateWait.Quantile(1)))
	fmt.Fprintf(tw, "decisions\t%s\t\t\n", counts(c.Decisions))
	fmt.Fprintf(tw, "released without a decision\t%s\t\t\n", counts(c.Released))
	fmt.Fprintf(tw, "released by the janitor (timeout)\t%.0f\t\t\n", c.Released["timeout"])
	if with != nil {
		fmt.Fprintf(tw, "admitted without a decision (never gated)\t%d\t\t\n", with.Ungated)
	}
	fmt.Fprintf(tw, "pod admissions\t%s\t\t\n", counts(c.Admissions))
	fmt.Fprintf(tw, "API requests per placed pod\t%s\t\t\n", perPod(c.PerPod))
	fmt.Fprintf(tw, "API writes per placed pod (POST+PUT+PATCH+DELETE)\t%.2f\t\t\n", c.WritesPerPod)
	fmt.Fprintf(tw, "CPU per placed pod (all replicas)\t%.2fms\t\t\n", c.CPUPerPod*1000)
	for _, r := range c.Replicas {
		role := "follower"
		if r.Leader {
			role = "leader"
		}
		fmt.Fprintf(tw, "  %s (%s)\tCPU %.1fs\tRSS %s, heap %s\theap per cached pod %.0f B\n",
			r.Name, role, r.CPUSeconds, mib(r.RSSBytes), mib(r.HeapBytes), r.HeapPerPod)
	}
	fmt.Fprintf(tw, "pod webhook latency (server side, %.0f admissions)\tp50 <= %s\tp99 <= %s\t\n",
		c.Admission.Total(), bound(c.Admission.Quantile(0.5)), bound(c.Admission.Quantile(0.99)))
	var prev float64
	for _, b := range c.Admission {
		fmt.Fprintf(tw, "  le %s\t%.0f\t(+%.0f)\t\n", bound(b.LE), b.Count, b.Count-prev)
		prev = b.Count
	}
}

// reportSplits prints the quota check of every workload, with the worst.
func reportSplits(tw io.Writer, res *result) {
	for _, b := range []struct {
		r     *burstResult
		label string
	}{
		{res.With, "with apportion"},
		{res.Pinned, "pinned by hand (for comparison; not checked)"},
		{res.Without, "without apportion (for comparison; not checked)"},
	} {
		r, label := b.r, b.label
		if r == nil {
			continue
		}
		fmt.Fprintf(tw, "\nSplit by node labels, %s: %d of %d workloads within quota\n", label, len(r.Splits)-r.OffQuota, len(r.Splits))
		if w, ok := worst(r.Splits); ok {
			fmt.Fprintf(tw, "  worst: %s (%s), deviation %.2f: %s\n", w.Workload, w.Strategy, w.Deviation, w.describe())
		}
	}
}

func bound(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "+Inf"
	case v < 0.001:
		return fmt.Sprintf("%gµs", v*1e6)
	case v < 1:
		return fmt.Sprintf("%gms", v*1e3)
	default:
		return fmt.Sprintf("%gs", v)
	}
}

// counts lists m as "k=v" in key order; perPod as "k v.vv".
func counts(m map[string]float64) string { return joinMap(m, "%s=%.0f") }
func perPod(m map[string]float64) string { return joinMap(m, "%s %.2f") }

func joinMap(m map[string]float64, format string) string {
	if len(m) == 0 {
		return "none"
	}
	keys := sortedKeys(m)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf(format, k, m[k])
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }

// reportCPU prints the CPU seconds of every process of the cluster in each
// burst: on a machine the whole cluster shares, what apportion adds is
// also what the others do not get.
func reportCPU(w io.Writer, res *result) {
	names := map[string]bool{}
	for _, r := range []*burstResult{res.Without, res.Pinned, res.With} {
		if r != nil {
			for n := range r.CPU {
				names[n] = true
			}
		}
	}
	if len(names) == 0 {
		return
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	fmt.Fprintln(w, "\nCPU seconds during the burst, by process\twithout apportion\tpinned by hand\twith apportion\t\t")
	total := [3]float64{}
	for _, n := range sorted {
		fmt.Fprintf(w, "  %s", n)
		for i, r := range []*burstResult{res.Without, res.Pinned, res.With} {
			v := math.NaN()
			if r != nil {
				if c, ok := r.CPU[n]; ok {
					v = c
					total[i] += c
				}
			}
			fmt.Fprintf(w, "\t%s", num(v, "s"))
		}
		fmt.Fprintln(w, "\t\t")
	}
	fmt.Fprintf(w, "  all\t%s\t%s\t%s\t\t\n", num(total[0], "s"), num(total[1], "s"), num(total[2], "s"))
}
