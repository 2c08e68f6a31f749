package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// target is one of the soak's targets and whether it held.
type target struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Held bool   `json:"held"`
	// Advisory targets are reported but do not fail the run.
	Advisory bool `json:"advisory,omitempty"`
}

// totals adds the minutes up.
type totals struct {
	admissions
	Settled, Within, FellBack, WithUndecided, Survivors int
	PendingApportion                                    int
	FrozenMinutes                                       int
}

func addUp(rows []minute) totals {
	var t totals
	for _, r := range rows {
		a := &t.admissions
		a.Seen += r.Seen
		a.SeenFrozen += r.SeenFrozen
		a.Decided += r.Decided
		a.Undecided += r.Undecided
		a.UndecidedFrozen += r.UndecidedFrozen
		a.PlainGated += r.PlainGated
		a.FailedOpen += r.FailedOpen
		a.Released += r.Released
		t.Settled += r.Settled
		t.Within += r.Within
		t.FellBack += r.FellBack
		t.WithUndecided += r.WithUndecided
		t.Survivors += r.Survivors
		t.PendingApportion += r.PendingApportion
		if r.Frozen {
			t.FrozenMinutes++
		}
	}
	return t
}

// maxGrowth is the growth limit of RSS and goroutines after the warm-up.
const maxGrowth = 0.10

// targets checks the run's minutes against the targets. warmUp minutes
// are left out of the growth checks, which compare the mean of the first
// tenth of the rest (at least one sample) with the last tenth's.
func targets(rows []minute, warmUp time.Duration) []target {
	t := addUp(rows)
	out := []target{
		{Name: "pods without a decision outside frozen moments", Want: "0",
			Got:  fmt.Sprintf("%d (of %d placed; %d failed open, %d released by the gate timeout)", t.Undecided, t.Decided+t.Undecided+t.UndecidedFrozen, t.FailedOpen, t.Released),
			Held: t.Undecided == 0},
	}
	frozenShare := 0.0
	if t.SeenFrozen > 0 {
		frozenShare = 100 * float64(t.UndecidedFrozen) / float64(t.SeenFrozen)
	}
	out = append(out, target{Name: "pods without a decision while a replica was frozen", Want: "< 1% of the pods created meanwhile",
		Got:  fmt.Sprintf("%d of %d (%.1f%%) in %d minutes with a frozen replica", t.UndecidedFrozen, t.SeenFrozen, frozenShare, t.FrozenMinutes),
		Held: frozenShare < 1, Advisory: true})
	within := fmt.Sprintf("%d of %d settled samples (not held to it: %d more with fallback pods, %d with pods admitted without a decision, %d after a scale-down that removed not-ready pods first)",
		t.Within, t.Settled, t.FellBack, t.WithUndecided, t.Survivors)
	if t.Settled > 0 {
		within = fmt.Sprintf("%.2f%%: ", 100*float64(t.Within)/float64(t.Settled)) + within
	}
	out = append(out, target{Name: "settled samples within quota", Want: "100%", Got: within, Held: t.Settled > 0 && t.Within == t.Settled})
	out = append(out, target{Name: "pods of workloads that did not opt in held by the gate", Want: "0",
		Got: strconv.Itoa(t.PlainGated), Held: t.PlainGated == 0})
	out = append(out, target{Name: "pods Pending past their capacity timeout because of apportion", Want: "0",
		Got: fmt.Sprintf("%d pod-minutes", t.PendingApportion), Held: t.PendingApportion == 0})
	out = append(out, growthTarget("RSS (largest replica)", rows, warmUp, func(m minute) float64 { return m.MaxRSSMiB }, "MiB"))
	out = append(out, growthTarget("goroutines (largest replica)", rows, warmUp, func(m minute) float64 { return m.MaxGoroutines }, ""))
	return out
}

// growthTarget compares the mean of v over the first tenth of the samples
// after warmUp with the last tenth's; samples without a reading (0) are
// left out.
func growthTarget(name string, rows []minute, warmUp time.Duration, v func(minute) float64, unit string) target {
	t := target{Name: name + " growth after warm-up", Want: fmt.Sprintf("< %.0f%%", 100*maxGrowth)}
	var vals []float64
	for _, r := range rows {
		if time.Duration(r.Elapsed*float64(time.Minute)) > warmUp && v(r) > 0 {
			vals = append(vals, v(r))
		}
	}
	if len(vals) < 2 {
		t.Got = fmt.Sprintf("not measured: %d samples after the warm-up", len(vals))
		return t
	}
	k := max(1, len(vals)/10)
	first, last := mean(vals[:k]), mean(vals[len(vals)-k:])
	growth := last/first - 1
	t.Got = fmt.Sprintf("%+.1f%% (%.1f%s to %.1f%s, mean of %d samples each)", 100*growth, first, unit, last, unit, k)
	t.Held = growth < maxGrowth
	return t
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// failed reports whether a target that is not advisory failed.
func failed(ts []target) []string {
	var out []string
	for _, t := range ts {
		if !t.Held && !t.Advisory {
			out = append(out, t.Name)
		}
	}
	return out
}

// printTargets writes the summary table.
func printTargets(w io.Writer, ts []target) {
	fmt.Fprintln(w, "\nsoak summary:")
	for _, t := range ts {
		mark := "held"
		switch {
		case !t.Held && t.Advisory:
			mark = "MISSED (advisory)"
		case !t.Held:
			mark = "FAILED"
		}
		fmt.Fprintf(w, "  %-66s want %-36s %s: %s\n", t.Name, t.Want, mark, t.Got)
	}
}

// line is a minute on one line of stdout.
func (m minute) line() string {
	frozen := ""
	if m.Frozen {
		frozen = " FROZEN"
	}
	var reps []string
	for _, r := range m.Replicas {
		lead := ""
		if r.Leader {
			lead = "*"
		}
		switch {
		case r.Frozen:
			reps = append(reps, r.Name+lead+" frozen")
		case r.Error != "":
			reps = append(reps, r.Name+lead+" unreadable")
		default:
			reps = append(reps, fmt.Sprintf("%s%s %.0fMiB/%.0fMiB/%.0fg", shortName(r.Name), lead, r.RSSMiB, r.HeapMiB, r.Goroutines))
		}
	}
	return fmt.Sprintf("min %3d%s | pods %4d placed %4d undecided %d (frozen %d/%d) | settled %3d within %3d off %d fallback %d undecided-pods %d not-ready-removed %d unsettled %3d | pending>%s %d (apportion %d) | API pod writes %5.0f = %.1f/pod, apportion %4.0f = %.2f/placed | %s | events %s",
		m.Index, frozen, m.Seen, m.Decided, m.Undecided, m.UndecidedFrozen, m.SeenFrozen, m.Settled, m.Within, m.Off, m.FellBack, m.WithUndecided, m.Survivors, m.Unsettled,
		"timeout", len(m.Pending), m.PendingApportion, m.APIPodWrites, m.WritesPerPod, m.ApportionWrites, m.WritesPerPlaced,
		strings.Join(reps, ", "), strings.Join(m.Events, ","))
}

// shortName keeps the pod's random suffix only.
func shortName(pod string) string {
	if i := strings.LastIndexByte(pod, '-'); i >= 0 {
		return pod[i+1:]
	}
	return pod
}

var csvHeader = []string{"minute", "time", "frozen", "events", "pods_created", "pods_created_frozen", "placed", "undecided", "undecided_frozen",
	"failed_open", "released", "settled", "within_quota", "within_quota_pct", "off_quota", "fellback", "with_undecided_pods", "not_ready_removed", "unsettled", "pending_past_timeout",
	"pending_because_of_apportion", "api_pod_writes", "api_pod_writes_per_pod", "apportion_writes", "apportion_writes_per_placed",
	"max_rss_mib", "max_heap_mib", "max_goroutines", "replicas"}

// csvRow is m as a row under csvHeader; replicas as
// name:leader:rss:heap:goroutines separated by spaces.
func (m minute) csvRow() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	var reps []string
	for _, r := range m.Replicas {
		reps = append(reps, fmt.Sprintf("%s:%t:%.1f:%.1f:%.0f", r.Name, r.Leader, r.RSSMiB, r.HeapMiB, r.Goroutines))
	}
	return []string{strconv.Itoa(m.Index), m.At.UTC().Format(time.RFC3339), strconv.FormatBool(m.Frozen), strings.Join(m.Events, " "),
		strconv.Itoa(m.Seen), strconv.Itoa(m.SeenFrozen), strconv.Itoa(m.Decided), strconv.Itoa(m.Undecided), strconv.Itoa(m.UndecidedFrozen),
		strconv.Itoa(m.FailedOpen), strconv.Itoa(m.Released), strconv.Itoa(m.Settled), strconv.Itoa(m.Within), f(m.withinPercent()),
		strconv.Itoa(m.Off), strconv.Itoa(m.FellBack), strconv.Itoa(m.WithUndecided), strconv.Itoa(m.Survivors), strconv.Itoa(m.Unsettled), strconv.Itoa(len(m.Pending)), strconv.Itoa(m.PendingApportion),
		f(m.APIPodWrites), f(m.WritesPerPod), f(m.ApportionWrites), f(m.WritesPerPlaced), f(m.MaxRSSMiB), f(m.MaxHeapMiB), f(m.MaxGoroutines),
		strings.Join(reps, " ")}
}

// writeCSV writes the header and rows.
func writeCSV(w io.Writer, rows []minute) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, r := range rows {
		if err := cw.Write(r.csvRow()); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
