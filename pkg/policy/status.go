package policy

import (
	"context"
	"fmt"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/split"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Workload is what the controller observed of one targeted workload.
type Workload struct {
	Kind string
	Name string
	// Replicas is the workload's spec.replicas, a batch workload's live
	// pods.
	Replicas int32
	// Annotation is where the workload's own strategy is written
	// (strategy.Source.String()), "" when it has none; it wins over every
	// policy.
	Annotation string
	// OptedOut is true when the workload opts out (apportion.dev/skip):
	// nothing places it.
	OptedOut bool
	// Winner is the name of the PlacementPolicy that places the workload:
	// the oldest targeting it.
	Winner string
	// NodeLabels holds, for each Running pod of the workload, the labels of
	// its node; but for the pods released beyond caps, which BeyondCaps
	// counts: they are in no group, whatever their node (split.Input).
	NodeLabels []map[string]string
	BeyondCaps int64
}

// PlacedBy says what places the workload's pods when policy is the one
// asking.
func (w Workload) PlacedBy(policy string) string {
	switch {
	case w.Annotation != "" || w.OptedOut:
		return "Annotation"
	case w.Winner == policy:
		return "PlacementPolicy"
	default:
		return "PlacementPolicy " + w.Winner
	}
}

// Workloads are the workloads of kinds that the PlacementPolicy p targets,
// each with what places it (Observe), and the Running pods of those p
// places (Running): what Status takes. A workload gone from the
// cache meanwhile is left out.
func (x *Observer) Workloads(ctx context.Context, p *v1alpha1.PlacementPolicy, kinds []schema.GroupVersionKind) ([]Workload, error) {
	tops, err := x.Targets(ctx, p, kinds)
	if err != nil {
		return nil, err
	}
	out := make([]Workload, 0, len(tops))
	for _, top := range tops {
		o, err := x.Observe(ctx, top)
		if err != nil {
			return nil, err
		}
		if o.Gone {
			continue
		}
		w := o.ForPolicy(p)
		if o.PlacedBy(p.Namespace+"/"+p.Name, false) {
			if w.NodeLabels, w.BeyondCaps, err = x.Running(ctx, o); err != nil {
				return nil, err
			}
		}
		out = append(out, w)
	}
	return out, nil
}

// ForPolicy is what the status of the PlacementPolicy p, which targets the
// workload, says of it.
func (o *Observed) ForPolicy(p *v1alpha1.PlacementPolicy) Workload {
	w := Workload{Kind: o.Top.GroupVersionKind().Kind, Name: o.Top.Name, Replicas: int32(min(o.Replicas, 1<<31-1)), Winner: p.Name}
	i := o.Info
	switch {
	case i.Found && i.Source.Policy == "":
		w.Annotation = i.Source.String()
	case i.Skip:
		w.OptedOut = true
	case i.Found && !i.Source.Cluster:
		// A policy of the namespace: "namespace/name".
		_, w.Winner, _ = strings.Cut(i.Source.Policy, "/")
	}
	return w
}

// GroupPool is the NodePool serving one group of the strategy (empty without
// Karpenter), or why none does.
type GroupPool struct {
	NodePool string
	Err      error
}

// Status computes a policy's status from what the controller observed: the
// targeted workloads and the pool of each group of the policy's strategy
// (indexed like the strategy's groups). The conditions of p.Status keep their
// transition times when their status does not change; now stamps the others.
//
// For the workloads the policy places (no annotation of their own, no
// opt-out, no older policy): Desired is the quota method's count per group
// at spec.replicas, over the groups a NodePool serves; Actual counts the
// Running pods by the labels of their node, in the first group (in
// strategy order) whose labels the node carries. Both are summed over those workloads. WithinQuota holds
// when every such workload's Running pods are within floor/ceil of each
// group's ideal share at their number, over the groups a NodePool serves,
// and none runs outside them.
func Status(p *v1alpha1.PlacementPolicy, workloads []Workload, pools []GroupPool, now metav1.Time) v1alpha1.PlacementPolicyStatus {
	b := &statusBuilder{p: p, now: now, st: v1alpha1.PlacementPolicyStatus{
		ObservedGeneration: p.Generation,
		Target:             describeTarget(p, workloads),
		Conditions:         append([]metav1.Condition(nil), p.Status.Conditions...),
	}}
	placed := b.workloads(workloads)

	raw, err := Strategy(&p.Spec)
	b.st.Strategy = raw
	if err != nil {
		b.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidStrategy, err.Error())
		b.set(v1alpha1.ConditionGroupUnavailable, metav1.ConditionUnknown, v1alpha1.ReasonInvalidStrategy, "")
		return b.st
	}
	// Strategy parsed it already: only the engine can refuse it here.
	s, err := compiled.Parse(raw)
	if err != nil {
		b.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidStrategy, err.Error())
		return b.st
	}
	unavailable := b.groups(s.Strategy, pools)
	anyAvail := len(unavailable) < len(s.Strategy.Groups)
	b.quota(s, placed, anyAvail)
	b.ready(len(workloads), placed, anyAvail, unavailable)
	return b.st
}

// statusBuilder fills a policy's status one step at a time.
type statusBuilder struct {
	p   *v1alpha1.PlacementPolicy
	now metav1.Time
	st  v1alpha1.PlacementPolicyStatus
}

// set sets a condition; meta.SetStatusCondition keeps its transition time
// when its status does not change.
func (b *statusBuilder) set(typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&b.st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: b.p.Generation, LastTransitionTime: b.now})
}

// workloads lists the targeted workloads and what places each, sets the
// Conflict condition, and returns those the policy places.
func (b *statusBuilder) workloads(workloads []Workload) (placed []*Workload) {
	p := b.p
	var byAnnotation, byPolicy []string
	for i := range workloads {
		w := &workloads[i]
		ws := v1alpha1.WorkloadStatus{Kind: w.Kind, Name: w.Name, Replicas: w.Replicas, PlacedBy: w.PlacedBy(p.Name)}
		switch {
		case w.Annotation != "":
			byAnnotation = append(byAnnotation, fmt.Sprintf("%s/%s carries its own strategy (%s)", w.Kind, w.Name, w.Annotation))
		case w.OptedOut:
			byAnnotation = append(byAnnotation, fmt.Sprintf("%s/%s opts out (%s: \"true\")", w.Kind, w.Name, annotations.Skip))
		case w.Winner != p.Name:
			byPolicy = append(byPolicy, fmt.Sprintf("%s/%s is placed by the older PlacementPolicy %s", w.Kind, w.Name, w.Winner))
		default:
			placed = append(placed, w)
			b.st.Replicas = addCapped(b.st.Replicas, int64(w.Replicas))
		}
		b.st.Workloads = append(b.st.Workloads, ws)
	}
	switch {
	case len(byPolicy) > 0:
		b.set(v1alpha1.ConditionConflict, metav1.ConditionTrue, v1alpha1.ReasonOlderPolicyWins, strings.Join(append(byPolicy, byAnnotation...), "; "))
	case len(byAnnotation) > 0:
		b.set(v1alpha1.ConditionConflict, metav1.ConditionTrue, v1alpha1.ReasonAnnotationWins, strings.Join(byAnnotation, "; ")+": an annotation wins over a policy")
	default:
		b.set(v1alpha1.ConditionConflict, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, "")
	}
	return placed
}

// groups lists the strategy's groups with the pool serving each (the others
// with why they are left out), sets the GroupUnavailable condition, and
// returns a line for each group left out.
func (b *statusBuilder) groups(s *strategy.Strategy, pools []GroupPool) (unavailable []string) {
	b.st.Groups = make([]v1alpha1.GroupStatus, len(s.Groups))
	for i, g := range s.Groups {
		gs := &b.st.Groups[i]
		gs.Key = g.Key()
		switch {
		case i >= len(pools):
			gs.Unavailable = "not looked up"
		case pools[i].Err != nil:
			gs.Unavailable = pools[i].Err.Error()
		default:
			gs.NodePool = pools[i].NodePool
			continue
		}
		unavailable = append(unavailable, fmt.Sprintf("group %d (%s): %s", i+1, g.Key(), gs.Unavailable))
	}
	if len(unavailable) > 0 {
		b.set(v1alpha1.ConditionGroupUnavailable, metav1.ConditionTrue, v1alpha1.ReasonNoNodePool,
			strings.Join(unavailable, "; ")+": left out of the split")
	} else {
		b.set(v1alpha1.ConditionGroupUnavailable, metav1.ConditionFalse, v1alpha1.ReasonGroupsAvailable, "")
	}
	return unavailable
}

// quota sums Desired and Actual over the placed workloads and tells whether
// each, and all, are within quota (split.Compute: the pods beyond caps may
// run anywhere).
func (b *statusBuilder) quota(s *compiled.Strategy, placed []*Workload, anyAvail bool) {
	b.st.WithinQuota = len(placed) > 0 && anyAvail
	leftOut := make([]string, len(s.Strategy.Groups))
	for i, g := range b.st.Groups {
		leftOut[i] = g.Unavailable
	}
	for _, w := range placed {
		// The split the placement controller reaches at spec.replicas,
		// in closed form (the same at any size), and the Running pods by
		// the labels of their node: in the first group (in strategy
		// order) whose labels the node carries. Pods left in a group no
		// NodePool serves now are off the split Desired shows, as are
		// pods outside every group (but for those beyond caps). The pods
		// released beyond caps count in no group.
		sp := split.Compute(split.Input{Strategy: s, Replicas: int64(w.Replicas), LeftOut: leftOut, NodeLabels: w.NodeLabels, BeyondCaps: w.BeyondCaps})
		within := anyAvail && sp.WithinQuota
		for i, g := range sp.Groups {
			b.st.Groups[i].Desired = addCapped(b.st.Groups[i].Desired, g.Desired)
			b.st.Groups[i].Actual = addCapped(b.st.Groups[i].Actual, g.Actual)
		}
		b.st.Unmatched = addCapped(b.st.Unmatched, sp.Unmatched)
		b.st.BeyondCaps = addCapped(b.st.BeyondCaps, sp.BeyondCaps)
		b.st.WithinQuota = b.st.WithinQuota && within
		for i := range b.st.Workloads {
			if b.st.Workloads[i].Kind == w.Kind && b.st.Workloads[i].Name == w.Name {
				b.st.Workloads[i].WithinQuota = &within
			}
		}
	}
}

// addCapped adds v to sum and stops at the largest int32: a selector can
// target many workloads of up to that many replicas each, and a sum that
// wrapped would show a negative count.
func addCapped(sum int32, v int64) int32 {
	return int32(min(int64(sum)+max(v, 0), math.MaxInt32))
}

// ready sets the Ready condition: whether the policy places any workload, on
// any group.
func (b *statusBuilder) ready(targeted int, placed []*Workload, anyAvail bool, unavailable []string) {
	switch {
	case targeted == 0:
		b.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTargetNotFound, "no workload of the namespace matches the target")
	case len(placed) == 0:
		b.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConflict, "the policy places no workload: every targeted workload follows something else (see the Conflict condition)")
	case !anyAvail:
		b.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNoGroupAvailable, "no group of the strategy has a NodePool: "+strings.Join(unavailable, "; "))
	default:
		names := make([]string, len(placed))
		for i, w := range placed {
			names[i] = w.Kind + "/" + w.Name
		}
		b.set(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonApplied,
			"places the new pods of "+strings.Join(names, ", ")+"; running pods are not moved")
	}
}

// describeTarget is the Target column: the workload the policy names, or the
// selector and how many workloads it matches.
func describeTarget(p *v1alpha1.PlacementPolicy, workloads []Workload) string {
	t := p.Spec.Target
	if t.Selector == nil {
		return t.Kind + "/" + t.Name
	}
	sel := metav1.FormatLabelSelector(t.Selector)
	if t.Kind != "" {
		sel = t.Kind + " " + sel
	}
	return fmt.Sprintf("%s (%d)", sel, len(workloads))
}
