package drift

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	apevents "github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/split"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// noGroup is the group label of the Running pods on nodes of no group.
const noGroup = "none"

// tracked is what the sweeps know of one placed workload.
type tracked struct {
	ref workload.Ref
	// since is when its drift began (the first settled sweep that saw
	// it); zero while it is within quota.
	since time.Time
	// kind is the kind of its drift (driftKind), for the Events' dedupe.
	kind string
	// reported is true once a SplitDrift Event was recorded for the
	// current drift: its end gets a SplitRestored.
	reported bool
	// exported is true when the workload has series of its own (within
	// the cap); groups are the group label values its pods series use.
	exported bool
	groups   []string
	// past is true while it has drifted for longer than After.
	past bool
}

// update records one sweep's split of a workload: a settled sweep starts,
// continues or ends its drift; any sweep refreshes its series.
func (c *Controller) update(ctx context.Context, info *workload.Info, sp split.Split, settled bool) {
	t := c.tracked[info.Workload.UID]
	if t == nil {
		t = &tracked{ref: info.Workload}
		c.tracked[info.Workload.UID] = t
	}
	t.ref = info.Workload
	now := c.clock.Now()
	if settled {
		switch {
		case sp.Drifting() && t.since.IsZero():
			t.since, t.kind = now, driftKind(sp)
		case sp.Drifting():
			t.kind = driftKind(sp)
		default:
			if t.reported {
				c.restored(ctx, t, sp, now)
			}
			t.since, t.kind, t.reported = time.Time{}, "", false
		}
		t.past = c.opts.After > 0 && !t.since.IsZero() && now.Sub(t.since) > c.opts.After
		if t.past {
			c.drifting(ctx, t, sp, now)
		}
	}
	t.exportPods(c, sp)
	t.export()
}

// drifting records the SplitDrift Event (deduplicated: one per workload
// per eventInterval while its drift keeps its kind) and logs it.
func (c *Controller) drifting(ctx context.Context, t *tracked, sp split.Split, now time.Time) {
	how := now.Sub(t.since).Round(time.Second)
	msg := fmt.Sprintf("off its strategy for %s: %s", how, sp.Describe())
	t.reported = true // recorded now, or within the last eventInterval
	if c.recorder.Publish(apevents.Event{Regarding: t.ref.ObjectReference(), Type: corev1.EventTypeWarning, Reason: ReasonSplitDrift, Action: "Observe",
		Message: msg, DedupeValues: []string{string(t.ref.UID), t.kind}, DedupeTimeout: eventInterval}) {
		log.FromContext(ctx).Info("workload off its strategy", "workload", t.ref.String(), "for", how.String(), "split", sp.Describe())
	}
}

// restored records the SplitRestored Event once a reported drift ended.
func (c *Controller) restored(ctx context.Context, t *tracked, sp split.Split, now time.Time) {
	how := now.Sub(t.since).Round(time.Second)
	msg := fmt.Sprintf("back within its strategy after %s off it: %s", how, sp.Describe())
	c.recorder.Publish(apevents.Event{Regarding: t.ref.ObjectReference(), Type: corev1.EventTypeNormal, Reason: ReasonSplitRestored, Action: "Observe", Message: msg})
	log.FromContext(ctx).Info("workload back within its strategy", "workload", t.ref.String(), "after", how.String())
}

// driftKind names what is off: the groups left out, pods outside quota,
// pods on nodes of no group. A drift that changes kind gets a new Event.
func driftKind(sp split.Split) string {
	var parts []string
	for i, g := range sp.Groups {
		if g.LeftOut != "" {
			parts = append(parts, "out:"+strconv.Itoa(i+1))
		}
	}
	if !sp.WithinQuota {
		parts = append(parts, "quota")
	}
	if sp.Unmatched > 0 {
		parts = append(parts, "unmatched")
	}
	return strings.Join(parts, ",")
}

// labels are the workload's label values.
func (t *tracked) labels() []string {
	return []string{t.ref.Namespace, t.ref.Kind, t.ref.Name}
}

// export sets the workload's drift series when it has series of its own.
func (t *tracked) export() {
	if !t.exported {
		return
	}
	v := 0.0
	if t.past {
		v = 1
	}
	metrics.WorkloadDrift.WithLabelValues(t.labels()...).Set(v)
}

// exportPods sets the desired and running pods of every group, when the
// workload is within the cap of exported workloads; the series of groups
// it no longer has are deleted.
func (t *tracked) exportPods(c *Controller, sp split.Split) {
	if !t.exported {
		t.exported = c.opts.Exported.Admit(string(t.ref.UID))
		if !t.exported {
			return
		}
	}
	desired, running := map[string]int64{}, map[string]int64{}
	var groups []string
	add := func(g string) {
		if _, ok := running[g]; !ok {
			groups = append(groups, g)
			running[g] = 0
		}
	}
	for _, g := range sp.Groups {
		label := metrics.Groups.Value(g.Key)
		add(label)
		desired[label] += g.Desired
		running[label] += g.Actual
	}
	if sp.Unmatched > 0 {
		add(noGroup)
		running[noGroup] += sp.Unmatched
	}
	l := t.labels()
	for _, g := range t.groups {
		if _, ok := running[g]; !ok {
			metrics.WorkloadPods.DeleteLabelValues(append(l, g, metrics.StateDesired)...)
			metrics.WorkloadPods.DeleteLabelValues(append(l, g, metrics.StateRunning)...)
		}
	}
	for _, g := range groups {
		if g != noGroup {
			metrics.WorkloadPods.WithLabelValues(append(l, g, metrics.StateDesired)...).Set(float64(desired[g]))
		}
		metrics.WorkloadPods.WithLabelValues(append(l, g, metrics.StateRunning)...).Set(float64(running[g]))
	}
	t.groups = groups
}

// forget deletes the series of a workload no longer seen (gone, scaled to
// zero, or no longer placed) and frees its place under the cap.
func (t *tracked) forget(c *Controller) {
	if !t.exported {
		return
	}
	metrics.WorkloadDrift.DeletePartialMatch(map[string]string{metrics.LabelWorkloadNamespace: t.ref.Namespace, metrics.LabelKind: t.ref.Kind, metrics.LabelName: t.ref.Name})
	metrics.WorkloadPods.DeletePartialMatch(map[string]string{metrics.LabelWorkloadNamespace: t.ref.Namespace, metrics.LabelKind: t.ref.Kind, metrics.LabelName: t.ref.Name})
	c.opts.Exported.Forget(string(t.ref.UID))
}

// exportCount sets apportion_workloads_drifting over every workload, those
// past the cap included.
func (c *Controller) exportCount() {
	n := 0
	for _, t := range c.tracked {
		if t.past {
			n++
		}
	}
	metrics.WorkloadsDrifting.Set(float64(n))
}
