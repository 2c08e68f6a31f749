package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/split"
)

const (
	// maxConflicts bounds the policies named in a cluster policy's
	// status.conflicts.
	maxConflicts = 10
	// MaxOffStrategy bounds the workloads named in its status.offStrategy.
	MaxOffStrategy = 10
)

// clusterTally is what one cluster policy's status counts.
type clusterTally struct {
	p        *v1alpha1.ClusterPlacementPolicy
	all      []*v1alpha1.ClusterPlacementPolicy
	strategy *compiled.Strategy // nil: invalid, nothing is split

	namespaces, matched, placed, within int32
	// off: "namespace/Kind/name: reason" of every placed workload not
	// within quota.
	off []string
	// tied: the policies of p's priority that cover some of the same
	// workloads, where that priority is the highest; tiedOn one of them.
	tied    map[string]bool
	tiedOn  string
	tiedFor int
}

// ClusterStatus computes the status of the cluster policy p over the
// workloads of kinds it covers: how many it covers (in how many
// namespaces) and places, how many of those are within quota (split over
// their Running pods, those released beyond caps in no group) and the
// first MaxOffStrategy that are not, and the policies of its priority it
// ties with. The conditions of p.Status keep their transition times when
// their status does not change; now stamps the others.
//
// Cost: one list of namespaces and of cluster policies, one list per
// covered namespace and kind; per covered workload, what Observe reads;
// per placed workload, its Running pods through the pod index and their
// nodes' metadata.
func (x *Observer) ClusterStatus(ctx context.Context, p *v1alpha1.ClusterPlacementPolicy, kinds []schema.GroupVersionKind, now metav1.Time) (v1alpha1.ClusterPlacementPolicyStatus, error) {
	all, err := x.source.ClusterPolicies(ctx)
	if err != nil {
		return v1alpha1.ClusterPlacementPolicyStatus{}, err
	}
	t := &clusterTally{p: p, all: all, tied: map[string]bool{}}
	raw, serr := ClusterStrategy(&p.Spec)
	if serr == nil {
		t.strategy, _ = compiled.Parse(raw)
	}
	if t.namespaces, err = x.Covered(ctx, p, kinds, func(ns, top *metav1.PartialObjectMetadata) error {
		return t.add(ctx, x, ns, top)
	}); err != nil {
		return v1alpha1.ClusterPlacementPolicyStatus{}, err
	}
	return t.status(raw, serr, now), nil
}

// add counts one covered workload: the ties on it, who places it, and its
// split when p does.
func (t *clusterTally) add(ctx context.Context, x *Observer, ns, top *metav1.PartialObjectMetadata) error {
	t.matched++
	t.ties(x.source, ns, top)
	o, err := x.Observe(ctx, top)
	if err != nil || !o.PlacedBy(t.p.Name, true) {
		return err
	}
	t.placed++
	if t.strategy == nil {
		return nil
	}
	nodes, beyondCaps, err := x.Running(ctx, o)
	if err != nil {
		return err
	}
	sp := split.Compute(split.Input{Strategy: t.strategy, Replicas: o.Replicas, NodeLabels: nodes, BeyondCaps: beyondCaps})
	if sp.WithinQuota {
		t.within++
	} else {
		t.off = append(t.off, ns.Name+"/"+top.Kind+"/"+top.Name+": "+offReason(sp))
	}
	return nil
}

// ties records the policies of p's priority that cover top with p, when
// that priority is the highest there: the tie decides which of them the
// resolver gives top.
func (t *clusterTally) ties(source *Source, ns, top *metav1.PartialObjectMetadata) {
	var ranked []*v1alpha1.ClusterPlacementPolicy
	for _, q := range t.all {
		if q.UID == t.p.UID || source.Covers(q, ns, top) {
			ranked = append(ranked, q)
		}
	}
	slices.SortFunc(ranked, Ranked)
	if len(ranked) == 0 || ranked[0].Spec.Priority != t.p.Spec.Priority {
		return
	}
	tiedHere := false
	for _, q := range ranked {
		if q.UID != t.p.UID && q.Spec.Priority == t.p.Spec.Priority {
			t.tied[q.Name] = true
			tiedHere = true
		}
	}
	if tiedHere {
		t.tiedFor++
		if t.tiedOn == "" {
			t.tiedOn = top.Kind + " " + ns.Name + "/" + top.Name
		}
	}
}

// status is the status the tally makes, with the Ready and Conflict
// conditions.
func (t *clusterTally) status(raw string, serr error, now metav1.Time) v1alpha1.ClusterPlacementPolicyStatus {
	p := t.p
	st := v1alpha1.ClusterPlacementPolicyStatus{
		ObservedGeneration: p.Generation, Strategy: raw,
		Matched: t.matched, Placed: t.placed, WithinQuota: t.within, Namespaces: t.namespaces,
		Conditions: slices.Clone(p.Status.Conditions),
	}
	for name := range t.tied {
		st.Conflicts = append(st.Conflicts, name)
	}
	slices.Sort(st.Conflicts)
	st.Conflicts = st.Conflicts[:min(len(st.Conflicts), maxConflicts)]
	slices.Sort(t.off)
	st.OffStrategy = t.off[:min(len(t.off), MaxOffStrategy)]
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: p.Generation, LastTransitionTime: now}
	switch {
	case serr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonInvalidStrategy, serr.Error()
	case t.placed > 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, v1alpha1.ReasonApplied, fmt.Sprintf("places %d of the %d workloads it covers in %d namespaces", t.placed, t.matched, t.namespaces)
	default:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonNoWorkload, fmt.Sprintf("places none of the %d workloads it covers in %d namespaces", t.matched, t.namespaces)
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	conflict := metav1.Condition{Type: v1alpha1.ConditionConflict, ObservedGeneration: p.Generation, LastTransitionTime: now,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoConflict, Message: "no cluster policy of the same priority covers its workloads"}
	if len(t.tied) > 0 {
		conflict.Status, conflict.Reason = metav1.ConditionTrue, v1alpha1.ReasonPriorityTie
		conflict.Message = fmt.Sprintf("priority %d ties with %s on %d workloads (e.g. %s); the oldest policy, then the first by name, places them",
			p.Spec.Priority, strings.Join(st.Conflicts, ", "), t.tiedFor, t.tiedOn)
	}
	meta.SetStatusCondition(&st.Conditions, conflict)
	return st
}

// offReason says in a few words why a split is not within quota: the
// first group outside its quota, or the pods on nodes of no group.
func offReason(sp split.Split) string {
	for i, g := range sp.Groups {
		if !g.Within() {
			return fmt.Sprintf("group %d (%s) %d running, quota %s", i+1, g.Key, g.Actual, split.Bounds(g.Min, g.Max))
		}
	}
	if sp.Unmatched > 0 {
		return fmt.Sprintf("%d running on nodes of no group", sp.Unmatched)
	}
	return "outside quota"
}
