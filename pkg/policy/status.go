package policy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Workload is what the controller observed of one targeted workload.
type Workload struct {
	Kind string
	Name string
	// Replicas is the workload's spec.replicas.
	Replicas int32
	// Annotation is where the workload's own strategy is written
	// (strategy.Source.String()), "" when it has none; it wins over every
	// policy.
	Annotation string
	// Winner is the name of the oldest policy targeting the workload.
	Winner string
	// NodeLabels holds, for each Running pod of the workload, the labels of
	// its node.
	NodeLabels []map[string]string
}

// PlacedBy says what places the workload's pods when policy is the one
// asking.
func (w Workload) PlacedBy(policy string) string {
	switch {
	case w.Annotation != "":
		return "Annotation"
	case w.Winner == policy:
		return "PlacementPolicy"
	default:
		return "PlacementPolicy " + w.Winner
	}
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
// For the workloads the policy places (no annotation of their own, no older
// policy): Desired is the quota method's count per group at spec.replicas,
// over the groups a NodePool serves; Actual counts the Running pods by the
// labels of their node, in the first group (in strategy order) whose labels
// the node carries. Both are summed over those workloads. WithinQuota holds
// when every such workload's Running pods are within floor/ceil of each
// group's ideal share at their number, over the groups a NodePool serves,
// and none runs outside them.
func Status(p *v1alpha1.PlacementPolicy, workloads []Workload, pools []GroupPool, now metav1.Time) v1alpha1.PlacementPolicyStatus {
	st := v1alpha1.PlacementPolicyStatus{
		ObservedGeneration: p.Generation,
		Target:             describeTarget(p, workloads),
		Conditions:         append([]metav1.Condition(nil), p.Status.Conditions...),
	}
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: p.Generation, LastTransitionTime: now})
	}

	var placed []*Workload
	var byAnnotation, byPolicy []string
	for i := range workloads {
		w := &workloads[i]
		ws := v1alpha1.WorkloadStatus{Kind: w.Kind, Name: w.Name, Replicas: w.Replicas, PlacedBy: w.PlacedBy(p.Name)}
		switch {
		case w.Annotation != "":
			byAnnotation = append(byAnnotation, fmt.Sprintf("%s/%s carries its own strategy (%s)", w.Kind, w.Name, w.Annotation))
		case w.Winner != p.Name:
			byPolicy = append(byPolicy, fmt.Sprintf("%s/%s is placed by the older PlacementPolicy %s", w.Kind, w.Name, w.Winner))
		default:
			placed = append(placed, w)
			st.Replicas += w.Replicas
		}
		st.Workloads = append(st.Workloads, ws)
	}
	switch {
	case len(byPolicy) > 0:
		set(v1alpha1.ConditionConflict, metav1.ConditionTrue, v1alpha1.ReasonOlderPolicyWins, strings.Join(append(byPolicy, byAnnotation...), "; "))
	case len(byAnnotation) > 0:
		set(v1alpha1.ConditionConflict, metav1.ConditionTrue, v1alpha1.ReasonAnnotationWins, strings.Join(byAnnotation, "; ")+": an annotation wins over a policy")
	default:
		set(v1alpha1.ConditionConflict, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, "")
	}

	raw, err := Strategy(&p.Spec)
	st.Strategy = raw
	if err != nil {
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidStrategy, err.Error())
		set(v1alpha1.ConditionGroupUnavailable, metav1.ConditionUnknown, v1alpha1.ReasonInvalidStrategy, "")
		return st
	}
	s, _ := strategy.Parse(raw) // Strategy parsed it already
	m, err := plan.Method(s)
	if err != nil {
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidStrategy, err.Error())
		return st
	}

	avail := apportion.All
	var unavailable []string
	st.Groups = make([]v1alpha1.GroupStatus, len(s.Groups))
	for i, g := range s.Groups {
		st.Groups[i].Key = g.Key()
		switch {
		case i >= len(pools):
			st.Groups[i].Unavailable = "not looked up"
		case pools[i].Err != nil:
			st.Groups[i].Unavailable = pools[i].Err.Error()
		default:
			st.Groups[i].NodePool = pools[i].NodePool
			continue
		}
		avail = avail.Without(i)
		unavailable = append(unavailable, fmt.Sprintf("group %d (%s): %s", i+1, g.Key(), st.Groups[i].Unavailable))
	}
	anyAvail := len(unavailable) < len(s.Groups)
	if len(unavailable) > 0 {
		set(v1alpha1.ConditionGroupUnavailable, metav1.ConditionTrue, v1alpha1.ReasonNoNodePool,
			strings.Join(unavailable, "; ")+": left out of the split")
	} else {
		set(v1alpha1.ConditionGroupUnavailable, metav1.ConditionFalse, v1alpha1.ReasonGroupsAvailable, "")
	}

	selectors := make([]labels.Selector, len(s.Groups))
	for i, g := range s.Groups {
		selectors[i] = labels.SelectorFromSet(g.Selector())
	}
	st.WithinQuota = len(placed) > 0 && anyAvail
	for _, w := range placed {
		desired := make([]int64, len(s.Groups))
		if anyAvail {
			// The split the placement controller reaches at
			// spec.replicas, in closed form: the same at any size.
			desired = m.CountsAt(int64(w.Replicas), avail)
		}
		actual := make([]int64, len(s.Groups))
		var unmatched int32
		for _, nl := range w.NodeLabels {
			gi := -1
			for i, sel := range selectors {
				if sel.Matches(labels.Set(nl)) {
					gi = i
					break
				}
			}
			if gi < 0 {
				unmatched++
				continue
			}
			actual[gi]++
		}
		// Pods left in a group no NodePool serves now are off the split
		// Desired shows, as are pods outside every group.
		within := anyAvail && unmatched == 0 && m.WithinQuota(actual, avail)
		for i := range actual {
			within = within && (avail.Has(i) || actual[i] == 0)
		}
		for i := range st.Groups {
			st.Groups[i].Desired += int32(desired[i])
			st.Groups[i].Actual += int32(actual[i])
		}
		st.Unmatched += unmatched
		st.WithinQuota = st.WithinQuota && within
		for i := range st.Workloads {
			if st.Workloads[i].Kind == w.Kind && st.Workloads[i].Name == w.Name {
				st.Workloads[i].WithinQuota = &within
			}
		}
	}

	switch {
	case len(workloads) == 0:
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonTargetNotFound, "no workload of the namespace matches the target")
	case len(placed) == 0:
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonConflict, "the policy places no workload: every targeted workload follows something else (see the Conflict condition)")
	case !anyAvail:
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNoGroupAvailable, "no group of the strategy has a NodePool: "+strings.Join(unavailable, "; "))
	default:
		names := make([]string, len(placed))
		for i, w := range placed {
			names[i] = w.Kind + "/" + w.Name
		}
		set(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonApplied,
			"places the new pods of "+strings.Join(names, ", ")+"; running pods are not moved")
	}
	return st
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
