package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/test/quota"
)

// The batch mode's Job, in a namespace of its own, takes the capacity
// spread: its quota is over the Job's live pods.
const (
	batchNS  = "bench-batch"
	batchJob = "batch"
)

// batchResult is what the batch mode measured.
type batchResult struct {
	Pods        int    `json:"pods"`
	Parallelism int    `json:"parallelism"`
	Strategy    string `json:"strategy"`
	Completed   bool   `json:"completed"`
	// ToComplete is seconds from the Job's creation to its Complete
	// condition, as the bench saw it.
	ToComplete float64 `json:"toCompleteSeconds,omitempty"`
	Succeeded  int32   `json:"succeeded"`
	Failed     int32   `json:"failed"`
	Samples    samples `json:"samples"`
	// Run is the pod watch's timings of every pod of the Job.
	Run *burstResult `json:"run"`
}

// samples are the checks of the Job's live pods against the quota, one a
// second. Only those taken while the Job's pods are still being placed are
// held to it (as the batch e2e suite holds them, with the rule of
// test/quota): before the first pod is placed there is nothing to check,
// and once the last is placed no new pod corrects the split of those left.
type samples struct {
	Taken int `json:"taken"`
	Held  int `json:"held"`
	// Full is how many held samples had the Job at its parallelism, the
	// ones held to the quota at their count.
	Full   int `json:"atParallelism"`
	Within int `json:"withinQuota"`
	// AtCount is how many held samples were within the quota at their
	// own count too, the rule at parallelism applied to every sample:
	// for comparison only, a sample short of pods is often off it.
	AtCount int `json:"withinQuotaAtTheirCount"`
	// Worst is the first held sample with the most pods off; nil when
	// none was off.
	Worst *quotaSample `json:"worst,omitempty"`
	// Off are the first held samples off quota, up to maxOff.
	Off []quotaSample `json:"off,omitempty"`
}

// maxOff bounds the samples off quota kept for the report.
const maxOff = 20

// quotaSample is one check: when, and the split of the live pods then.
type quotaSample struct {
	AfterSeconds float64 `json:"afterSeconds"`
	Live         int     `json:"livePods"`
	// Held: taken while pods were still to be placed, with some live.
	Held bool `json:"held"`
	// PodsOff and Why are how the live pods were off by quota.Live's rule.
	PodsOff int64  `json:"podsOff"`
	Why     string `json:"why,omitempty"`
	// AtCount: within the quota at the live pods' own count.
	AtCount bool  `json:"withinQuotaAtTheirCount"`
	Split   split `json:"split"`
}

// add counts s; of the held samples off quota, the first with the most
// pods off is kept as the worst.
func (ss *samples) add(s quotaSample, parallelism int) {
	ss.Taken++
	if !s.Held {
		return
	}
	ss.Held++
	if s.Live >= parallelism {
		ss.Full++
	}
	if s.AtCount {
		ss.AtCount++
	}
	if s.PodsOff == 0 {
		ss.Within++
		return
	}
	if len(ss.Off) < maxOff {
		ss.Off = append(ss.Off, s)
	}
	if ss.Worst == nil || s.PodsOff > ss.Worst.PodsOff {
		ss.Worst = &s
	}
}

// checkSample checks the Job's live pods among recs against w's quota with
// the rule of quota.Live: the pods apportion has decided (as it counts
// them) and that are neither Succeeded nor Failed nor deleted, a bound pod
// by its node's labels, a pod decided but not bound yet by its decision's
// group. A pod not decided yet is not counted: its group is chosen when it
// is. recs hold the Job's finished and deleted pods too: the sample is held
// to the quota only while fewer than completions pods have been placed.
func checkSample(w workload, recs []podRecord, nodes map[string]map[string]string, parallelism, completions int) quotaSample {
	var live []podRecord
	var pending map[string]map[string]string
	placed := 0
	for _, r := range recs {
		if r.group != "" || r.node != "" {
			placed++
		}
		switch {
		case r.done || r.gone || (r.node == "" && r.group == ""):
			continue
		case r.node == "":
			// Decided, not bound: stands on a node of its group's labels.
			if pending == nil {
				pending = maps.Clone(nodes)
				if pending == nil {
					pending = map[string]map[string]string{}
				}
			}
			r.node = decidedNode + r.group
			if _, ok := pending[r.node]; !ok {
				if s, err := strategy.Parse(w.strategy); err == nil {
					for _, g := range s.Groups {
						if g.Key() == r.group {
							pending[r.node] = g.Selector()
						}
					}
				}
			}
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return quotaSample{Split: split{Workload: w.name, Strategy: w.strategy, Counts: map[string]int64{}, Within: true}}
	}
	if pending != nil {
		nodes = pending
	}
	qs := quotaSample{Live: len(live), Held: placed < completions, Split: checkSplit(w, live, nodes)}
	c, err := compiled.Parse(w.strategy)
	if err != nil {
		qs.PodsOff, qs.Why = int64(len(live)), err.Error()
		return qs
	}
	off := quota.Live(c, qs.Split.Counts, int64(parallelism))
	qs.PodsOff, qs.Why, qs.Split.Within = off.Pods, off.String(), off.Within()
	qs.AtCount = quota.At(c, qs.Split.Counts).Within()
	return qs
}

// decidedNode prefixes the stand-in node of a pod decided but not bound.
const decidedNode = "decided:"

// job is the batch mode's Job: pods completions, parallelism at a time, of
// the bench's pods, which kwok completes as soon as they run.
func job(ns, image string, pods, parallelism int) *batchv1.Job {
	spec := podSpec(image)
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: batchJob},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(int32(parallelism)),
			Completions: ptr.To(int32(pods)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"app": batchJob, benchLabel: "true"},
					Annotations: map[string]string{annotations.Strategy: strategies[0]},
				},
				Spec: spec,
			},
		},
	}
}

// runBatch runs the Job with apportion between two readings of the
// replicas' metrics, checking its live pods against the quota every second
// until it completes, fails or the run timeout passes.
func (b *bench) runBatch(ctx context.Context, res *result) error {
	if err := b.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: batchNS}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", batchNS, err)
	}
	before, err := b.take(ctx, true)
	if err != nil {
		return err
	}
	br := &batchResult{Pods: b.o.jobPods, Parallelism: b.o.jobParallel, Strategy: strategies[0]}
	res.Batch = br
	say("%s: a Job of %d pods, %d at a time", batchNS, b.o.jobPods, b.o.jobParallel)
	t0 := time.Now()
	cpu0 := cpuTimes(b.c.PIDs())
	if err := b.kube.Create(ctx, job(batchNS, b.image, b.o.jobPods, b.o.jobParallel)); err != nil {
		return fmt.Errorf("creating the Job: %w", err)
	}
	w := workload{name: batchJob, strategy: br.Strategy}
	nodes := map[string]map[string]string{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastSay := t0
	for ended := false; !ended; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		recs := b.watch.all(batchNS)
		if err := b.learnNodes(ctx, nodes, recs); err != nil {
			say("%s: skipping a sample: %v", batchNS, err)
			continue
		}
		s := checkSample(w, recs, nodes, b.o.jobParallel, b.o.jobPods)
		s.AfterSeconds = time.Since(t0).Seconds()
		br.Samples.add(s, b.o.jobParallel)
		var j batchv1.Job
		if err := b.kube.Get(ctx, client.ObjectKey{Namespace: batchNS, Name: batchJob}, &j); err != nil {
			say("%s: reading the Job: %v", batchNS, err)
			continue
		}
		br.Succeeded, br.Failed = j.Status.Succeeded, j.Status.Failed
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				br.Completed, br.ToComplete, ended = true, time.Since(t0).Seconds(), true
			case batchv1.JobFailed:
				ended = true
			}
		}
		if time.Since(lastSay) >= 10*time.Second {
			say("%s after %s: %d succeeded, %d failed, %d live, %d of %d samples within quota", batchNS,
				time.Since(t0).Round(time.Second), br.Succeeded, br.Failed, s.Live, br.Samples.Within, br.Samples.Taken)
			lastSay = time.Now()
		}
		if time.Since(t0) > b.o.runTimeout {
			say("%s: run timeout %s", batchNS, b.o.runTimeout)
			ended = true
		}
	}
	cpu := cpuSince(cpu0, cpuTimes(b.c.PIDs()))
	br.Run = measureBurst(b.watch.records(batchNS), b.o.jobPods, t0)
	br.Run.Apportion, br.Run.CPU = true, cpu
	b.settle(ctx)
	after, err := b.take(ctx, true)
	if err != nil {
		return err
	}
	leader := ""
	if l := b.leader(); l != nil {
		leader = l.Name
	}
	c := cost(before, after, leader, br.Run.Decided, b.watch.live(batchNS))
	res.Cost = &c
	return nil
}

// learnNodes adds to known the labels of every node, listed again only when
// the live pods of recs name a node it does not hold: the labels that put a
// pod in a group do not change on a node, and a node gone keeps them for its
// pods.
func (b *bench) learnNodes(ctx context.Context, known map[string]map[string]string, recs []podRecord) error {
	for _, r := range recs {
		if _, ok := known[r.node]; r.node != "" && !r.done && !r.gone && !ok {
			nodes, err := b.nodeLabels(ctx)
			if err != nil {
				return err
			}
			maps.Copy(known, nodes)
			return nil
		}
	}
	return nil
}

// reportBatch prints the batch mode's results.
func reportBatch(tw io.Writer, res *result) {
	br := res.Batch
	fmt.Fprintf(tw, "\nBatch: one Job of %d pods, %d at a time, with apportion (%d replica(s)); kwok completes each pod as it runs\n",
		br.Pods, br.Parallelism, res.ApportionReplicas)
	fmt.Fprintf(tw, "  strategy: %s\n", br.Strategy)
	done := "NOT complete"
	if br.Completed {
		done = "complete after " + num(br.ToComplete, "s")
	}
	fmt.Fprintf(tw, "Job\t%s\t%d succeeded, %d failed\n", done, br.Succeeded, br.Failed)
	if r := br.Run; r != nil {
		fmt.Fprintf(tw, "decisions per second\t%s\t%d pods decided\n", num(r.DecisionsPerSecond, "/s"), r.Decided)
		fmt.Fprintf(tw, "longest gate wait (pods: seen to decided)\t%s\t\n", num(r.MaxGateWait, "s"))
	}
	ss := br.Samples
	fmt.Fprintf(tw, "samples within quota (live pods by node labels, every second, while pods were still to be placed)\t%d of %d\t%d at parallelism; %d more before the first pod or after the last was placed, not held\n",
		ss.Within, ss.Held, ss.Full, ss.Taken-ss.Held)
	fmt.Fprintf(tw, "  of those, within the quota at their own count too (for comparison: a sample short of pods need not be)\t%d of %d\t\n", ss.AtCount, ss.Held)
	for _, o := range ss.Off {
		fmt.Fprintf(tw, "  off: after %s, %d live pods, %d pod(s) off: %s\n", num(o.AfterSeconds, "s"), o.Live, o.PodsOff, o.Why)
	}
	if w := ss.Worst; w != nil {
		fmt.Fprintf(tw, "  worst: after %s, %d live pods, %d pod(s) off: %s\n", num(w.AfterSeconds, "s"), w.Live, w.PodsOff, w.Split.describe())
	}
	if res.Cost != nil && br.Run != nil {
		reportCost(tw, br.Run, res.Cost)
	}
}

// batchVerdict fails a batch run whose Job did not complete or whose live
// pods were off quota at a held sample.
func batchVerdict(br *batchResult) []error {
	var errs []error
	if !br.Completed {
		errs = append(errs, fmt.Errorf("the Job did not complete: %d of %d pods succeeded, %d failed", br.Succeeded, br.Pods, br.Failed))
	}
	if off := br.Samples.Held - br.Samples.Within; off > 0 {
		w := br.Samples.Worst
		errs = append(errs, fmt.Errorf("%d of %d samples of the Job's live pods are off quota; the worst, after %s with %d live pods, %d pod(s) off: %s",
			off, br.Samples.Held, num(w.AfterSeconds, "s"), w.Live, w.PodsOff, w.Why))
	}
	return errs
}
