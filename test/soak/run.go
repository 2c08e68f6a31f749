package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// result is what summary.json holds.
type result struct {
	Duration string        `json:"duration"`
	Seed     int64         `json:"seed"`
	Workload int           `json:"workloads"`
	WarmUp   string        `json:"warmUp"`
	Targets  []target      `json:"targets"`
	Frozen   []window      `json:"frozen"`
	Events   []eventRecord `json:"events"`
	Minutes  []minute      `json:"minutes"`
}

// run sets the cluster up, deploys the workloads, churns them for the
// duration while sampling every interval, writes the results and returns
// an error when the run broke down or a target failed.
func run(ctx context.Context, o options, out io.Writer) (err error) {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", o.out, err)
	}
	setupStart := time.Now()
	e, err := setUp(ctx, o)
	defer func() { e.stop(err != nil) }()
	if err != nil {
		return err
	}
	m := newModel(o.scale)
	if err := e.deploy(ctx, m); err != nil {
		return err
	}
	say("deployed %d workloads; set-up took %s; churning for %s", len(m.workloads), time.Since(setupStart).Round(time.Second), o.duration)

	ch := newChurn(e, m, o.seed)
	s := newSampler(ctx, e, m, ch)
	churnCtx, stopChurn := context.WithTimeout(ctx, o.duration)
	defer stopChurn()
	churned := ch.start(churnCtx)

	var rows []minute
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the run's deadline passed at minute %d: %w", i, ctx.Err())
		case <-tick.C:
		}
		row := s.take(ctx, i)
		rows = append(rows, row)
		fmt.Fprintln(out, row.line())
		for _, why := range row.OffWhy {
			fmt.Fprintf(out, "        off quota: %s\n", why)
		}
		for _, p := range row.Pending {
			fmt.Fprintf(out, "        pending %s %s (apportion: %t): %s\n", p.Pod, p.Age, p.Apportion, p.Why)
		}
		if err := writeFiles(o, rows, ch, nil); err != nil {
			say("%v", err)
		}
		if time.Since(s.start) >= o.duration-o.interval/2 {
			break
		}
	}
	stopChurn()
	select {
	case <-churned:
	case <-time.After(5 * time.Minute):
		say("the churn did not stop within 5 minutes")
	}
	ts := targets(rows, o.warmUp)
	printTargets(out, ts)
	err = writeFiles(o, rows, ch, ts)
	if perr := writePlot(filepath.Join(o.out, "soak.png"), rows, ch.windows()); perr != nil {
		err = errors.Join(err, perr)
	}
	fmt.Fprintf(out, "results in %s (minutes.csv, summary.json, soak.png)\n", o.out)
	if f := failed(ts); len(f) > 0 {
		return errors.Join(err, fmt.Errorf("targets failed: %s", strings.Join(f, "; ")))
	}
	return err
}

// writeFiles rewrites minutes.csv and summary.json (targets nil: not yet).
func writeFiles(o options, rows []minute, ch *churn, ts []target) error {
	var buf bytes.Buffer
	if err := writeCSV(&buf, rows); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "minutes.csv"), buf.Bytes(), 0o644); err != nil {
		return err
	}
	ch.mu.Lock()
	res := result{Duration: o.duration.String(), Seed: o.seed, Workload: len(newModel(o.scale).workloads), WarmUp: o.warmUp.String(),
		Targets: ts, Frozen: append([]window(nil), ch.frozen...), Events: append([]eventRecord(nil), ch.events...), Minutes: rows}
	ch.mu.Unlock()
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, "summary.json"), data, 0o644)
}
