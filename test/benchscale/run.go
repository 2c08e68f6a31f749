package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// result is everything one benchmark measured; --json writes it.
type result struct {
	Workloads         int            `json:"workloads"`
	Replicas          int            `json:"replicas"`
	Pods              int            `json:"pods"`
	ApportionReplicas int            `json:"apportionReplicas"`
	Strategies        []string       `json:"strategies"`
	Without           *burstResult   `json:"without,omitempty"`
	Pinned            *burstResult   `json:"pinned,omitempty"`
	With              *burstResult   `json:"with,omitempty"`
	Batch             *batchResult   `json:"batch,omitempty"`
	Cost              *apportionCost `json:"apportion,omitempty"`
	CPUProfile        string         `json:"cpuProfile,omitempty"`
}

// run sets the cluster up, runs the bursts (or the Job of --batch), prints
// the report and returns an error when a burst did not finish or a split is
// off its quota.
func run(ctx context.Context, o options, out io.Writer) (err error) {
	b, err := setUp(ctx, o)
	defer func() { b.stop(err != nil) }()
	if err != nil {
		return err
	}
	var res *result
	var runErr error
	// What was measured is printed also when a later step fails.
	if o.batch {
		res = &result{ApportionReplicas: o.apportion}
		runErr = b.runBatch(ctx, res)
	} else {
		res = &result{Workloads: o.workloads, Replicas: o.replicas, Pods: o.workloads * o.replicas,
			ApportionReplicas: o.apportion, Strategies: strategies[:min(len(strategies), o.workloads)]}
		runErr = b.bursts(ctx, res)
	}
	if err := errors.Join(report(out, res), writeJSON(o.jsonFile, res)); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr != nil {
		return runErr
	}
	return verdict(res)
}

// bursts runs the burst without apportion, frees its capacity, then runs
// the burst with apportion (or the one --only names).
func (b *bench) bursts(ctx context.Context, res *result) error {
	for _, run := range []struct {
		mode string
		into **burstResult
	}{{modeWithout, &res.Without}, {modePinned, &res.Pinned}} {
		if !b.o.runs(run.mode) {
			continue
		}
		ns := "bench-" + run.mode
		var err error
		if *run.into, err = b.burst(ctx, ns, run.mode, nil); err != nil {
			return err
		}
		if b.o.runs(modeWith) || (run.mode == modeWithout && b.o.runs(modePinned)) {
			if err := b.free(ctx, ns); err != nil {
				return err
			}
		}
	}
	if b.o.runs(modeWith) {
		return b.runWith(ctx, res)
	}
	return nil
}

func writeJSON(file string, res *result) error {
	if file == "" {
		return nil
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the results: %w", err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return nil
}

// runWith runs the burst with apportion between two readings of the
// replicas' metrics, profiling the leader meanwhile if asked.
func (b *bench) runWith(ctx context.Context, res *result) error {
	// Let the replicas' informers take in the previous burst's deletions.
	time.Sleep(5 * time.Second)
	before, err := b.take(ctx, true)
	if err != nil {
		return err
	}
	profiled := make(chan error, 1)
	started := func() { profiled <- nil }
	if b.o.cpuProfile != "" {
		res.CPUProfile = b.o.cpuProfile
		started = func() { go func() { profiled <- b.profileLeader(ctx, b.o.cpuProfile, b.o.profileFor) }() }
	}
	if res.With, err = b.burst(ctx, "bench-with", modeWith, started); err != nil {
		return err
	}
	b.settle(ctx)
	after, err := b.take(ctx, true)
	if err != nil {
		return err
	}
	leader := ""
	if l := b.leader(); l != nil {
		leader = l.Name
	}
	c := cost(before, after, leader, res.With.Decided, b.watch.live("bench-with"))
	res.Cost = &c
	if err := <-profiled; err != nil {
		say("%v", err)
	}
	return nil
}

// verdict fails a benchmark whose burst with apportion did not get every
// pod scheduled, or left a workload off its quota (or whose Job did not
// complete, or had its live pods off quota).
func verdict(res *result) error {
	var errs []error
	if res.Batch != nil {
		errs = append(errs, batchVerdict(res.Batch)...)
	}
	if res.With != nil {
		if res.With.Reached == "" {
			errs = append(errs, fmt.Errorf("with apportion, %d of %d pods existed and not all were scheduled before the run timeout", res.With.Pods, res.Pods))
		}
		if res.With.OffQuota > 0 {
			w, _ := worst(res.With.Splits)
			errs = append(errs, fmt.Errorf("with apportion, %d of %d workloads are off their quota; the worst, %s: %s", res.With.OffQuota, len(res.With.Splits), w.Workload, w.describe()))
		}
	}
	if res.Without != nil && res.Without.Reached == "" {
		errs = append(errs, fmt.Errorf("without apportion, not every pod was scheduled before the run timeout"))
	}
	if res.Pinned != nil && res.Pinned.Reached == "" {
		errs = append(errs, fmt.Errorf("pinned by hand, not every pod was scheduled before the run timeout"))
	}
	return errors.Join(errs...)
}
