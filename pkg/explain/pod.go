package explain

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/split"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Pod states.
const (
	StatePlaced    = "placed"
	StateShadow    = "shadow"
	StateWaiting   = "waiting"
	StateNotPlaced = "not placed"
	// StateBeyondCaps: released without a group, every group with a
	// weight at its cap.
	StateBeyondCaps = "beyond caps"
)

// PodReport is why a pod went where it is.
type PodReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Node      string `json:"node,omitempty"`
	// NodeGroup is the strategy group whose labels the pod's node carries
	// ("" when none does, or the pod is not bound).
	NodeGroup string `json:"nodeGroup,omitempty"`
	// State is placed, shadow (decided, not applied), waiting (held by
	// the placement gate), beyond caps or not placed; Why says why it is
	// beyond caps or not placed.
	State string `json:"state"`
	Why   string `json:"why,omitempty"`
	// Decision is the pod's decision (or shadow decision) record.
	Decision *DecisionReport `json:"decision,omitempty"`
	// Architectures the pod may run on and where that comes from.
	Architectures     []string `json:"architectures,omitempty"`
	ArchitecturesFrom string   `json:"architecturesFrom"`
	Images            []string `json:"images"`
	// Profile is the runtime-class profile's rewrite of the pod's
	// resources, when one applied.
	Profile *ProfileReport `json:"profile,omitempty"`
	// Workload is the report of the pod's workload; nil for a pod
	// apportion does not follow the owner of.
	Workload *WorkloadReport `json:"workload,omitempty"`
}

// DecisionReport is a decision as recorded on the pod.
type DecisionReport struct {
	Group    string `json:"group"`
	NodePool string `json:"nodePool,omitempty"`
	// Shadow: recorded in shadow mode, not applied.
	Shadow bool `json:"shadow,omitempty"`
	// Reason is how the group was chosen: quota, fallback or
	// architecture; beyond_caps for a pod released without one.
	Reason string `json:"reason,omitempty"`
	// Strategy is the hash of the strategy decided with; Current whether
	// it is the workload's strategy now.
	Strategy string `json:"strategy,omitempty"`
	Current  bool   `json:"current"`
	Revision string `json:"revision,omitempty"`
	// Seen are the pods per group the decision counted before this one:
	// decided ones, and Strays, those admitted without a decision counted
	// by their node's labels.
	Seen   []GroupCount `json:"seen,omitempty"`
	Strays []GroupCount `json:"strays,omitempty"`
	// Fallback lists the groups that were out of capacity, Out why.
	Fallback []string `json:"fallback,omitempty"`
	Out      []string `json:"out,omitempty"`
}

// GroupCount is a count in one group.
type GroupCount struct {
	Group string `json:"group"`
	Count int64  `json:"count"`
}

// ProfileReport is a runtime-class profile's rewrite.
type ProfileReport struct {
	RuntimeClass string `json:"runtimeClass"`
	// Original are the resources the profile removed, by container.
	Original json.RawMessage `json:"original"`
}

// Pod reports on one pod.
func (c *Cluster) Pod(ctx context.Context, namespace, name string) (*PodReport, error) {
	p := &corev1.Pod{}
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, p); err != nil {
		return nil, err
	}
	r := &PodReport{Namespace: p.Namespace, Name: p.Name, Phase: string(p.Status.Phase), Node: p.Spec.NodeName}
	for _, ctr := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		r.Images = append(r.Images, ctr.Image)
	}
	if orig, ok := p.Annotations[annotations.OriginalResources]; ok {
		r.Profile = &ProfileReport{RuntimeClass: deref(p.Spec.RuntimeClassName), Original: json.RawMessage(orig)}
		if !json.Valid(r.Profile.Original) {
			r.Profile.Original, _ = json.Marshal(orig)
		}
	}
	var s *compiled.Strategy
	if w, err := c.podWorkload(ctx, p); err != nil {
		return nil, err
	} else if w != nil {
		r.Workload = w
		s, _ = compiled.Parse(w.Strategy)
	}
	r.decision(p, s)
	if s != nil && p.Spec.NodeName != "" {
		nodes, err := c.nodeLabels(ctx, []*corev1.Pod{p})
		if err != nil {
			return nil, err
		}
		if l := nodes[p.Spec.NodeName]; l != nil {
			if gi := split.Matcher(s)(l); gi >= 0 {
				r.NodeGroup = s.Strategy.Groups[gi].Key()
			}
		}
	}
	r.architectures(p)
	return r, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// podWorkload reports on the pod's workload; nil when apportion does not
// follow its owner.
func (c *Cluster) podWorkload(ctx context.Context, p *corev1.Pod) (*WorkloadReport, error) {
	up := metav1.GetControllerOfNoCopy(p)
	if up == nil {
		return nil, nil
	}
	var kind string
	switch {
	case workload.Is(up, workload.ReplicaSetGVK):
		kind = "ReplicaSet"
	case workload.Is(up, workload.StatefulSetGVK):
		kind = "StatefulSet"
	case workload.Is(up, workload.JobGVK):
		kind = "Job"
	case workload.Is(up, workload.WorkflowGVK) && c.Workflows:
		kind = "Workflow"
	default:
		return nil, nil
	}
	w, err := c.Workload(ctx, Ref{Kind: kind, Namespace: p.Namespace, Name: up.Name})
	if client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("reading the pod's %s %s: %w", kind, up.Name, err)
	}
	return w, nil
}

// decision fills the state and the decision record.
func (r *PodReport) decision(p *corev1.Pod, s *compiled.Strategy) {
	group, decided := p.Annotations[annotations.Group]
	sh, shadow := decision.ReadShadow(p)
	var rec decision.Record
	var recorded bool
	switch {
	case decided:
		r.State = StatePlaced
		r.Decision = &DecisionReport{Group: group, NodePool: p.Annotations[annotations.NodePool]}
		if fb := p.Annotations[annotations.Fallback]; fb != "" {
			r.Decision.Fallback = strings.Split(fb, decision.FallbackSeparator)
		}
		recorded = json.Unmarshal([]byte(p.Annotations[annotations.Decision]), &rec) == nil
	case shadow:
		r.State = StateShadow
		r.Decision = &DecisionReport{Group: sh.Group, NodePool: sh.NodePool, Shadow: true}
		if sh.Record != nil {
			rec, recorded = *sh.Record, true
		}
	case decision.HasGate(p):
		r.State, r.Why = StateWaiting, "held by the placement gate until apportion decides its group"
		return
	case decision.ReleasedBeyondCaps(p):
		r.State = StateBeyondCaps
		r.Why = "every group with a weight was at its cap: released without a group, it runs wherever the scheduler put it and counts in no group"
		r.Decision = &DecisionReport{}
		recorded = json.Unmarshal([]byte(p.Annotations[annotations.Decision]), &rec) == nil
	case p.Annotations[annotations.NodePool] != "" || p.Annotations[annotations.Architectures] != "":
		r.State = StatePlaced // placed by architecture alone: no group
		r.Decision = &DecisionReport{NodePool: p.Annotations[annotations.NodePool]}
		recorded = json.Unmarshal([]byte(p.Annotations[annotations.Decision]), &rec) == nil
	default:
		r.State, r.Why = StateNotPlaced, r.notPlaced(p)
		return
	}
	if !recorded {
		return
	}
	d := r.Decision
	d.Reason, d.Strategy, d.Revision, d.Out = rec.Reason, rec.Strategy, rec.Revision, rec.Out
	d.Current = s != nil && s.Hash == rec.Strategy
	name := func(i int) string {
		if d.Current && i < len(s.Strategy.Groups) {
			return s.Strategy.Groups[i].Key()
		}
		return fmt.Sprintf("group %d", i+1)
	}
	for i, n := range rec.Counts {
		d.Seen = append(d.Seen, GroupCount{Group: name(i), Count: n})
	}
	for i, n := range rec.Strays {
		d.Strays = append(d.Strays, GroupCount{Group: name(i), Count: n})
	}
}

// notPlaced says why a pod carries no decision.
func (r *PodReport) notPlaced(p *corev1.Pod) string {
	switch {
	case r.Workload == nil && metav1.GetControllerOfNoCopy(p) == nil:
		return "it has no controller: apportion places the pods of Deployments, StatefulSets, ReplicaSets and Argo Rollouts"
	case r.Workload == nil:
		return "its controller is a " + metav1.GetControllerOfNoCopy(p).Kind + ", which apportion does not follow"
	case r.Workload.NotPlaced != "":
		return r.Workload.NotPlaced
	case strings.EqualFold(strings.TrimSpace(p.Annotations[annotations.Skip]), "true"):
		return "opted out (" + annotations.Skip + `: "true" on the pod)`
	case podutil.IsTerminal(p) || podutil.IsTerminating(p):
		return "it is terminating or finished"
	default:
		return "admitted without a decision: the webhook failed open, no placement leader was alive, or the gate janitor released it (see the workload's Events and apportion's logs); it counts as a stray by its node's labels"
	}
}

// architectures says where the pod's architectures come from.
func (r *PodReport) architectures(p *corev1.Pod) {
	a := p.Annotations[annotations.Architectures]
	if r.Decision != nil && r.Decision.Shadow {
		sh, _ := decision.ReadShadow(p)
		a = strings.Join(sh.Architectures, ",")
	}
	switch {
	case a != "" && a != annotations.ArchitecturesAuto:
		r.Architectures = strings.Split(a, ",")
		r.ArchitecturesFrom = "the platforms every image of the pod offers, read from their registries at decision time"
	case r.State == StatePlaced || r.State == StateShadow:
		r.ArchitecturesFrom = "not restricted: the images were not inspected (architecture look-ups off, or the look-up failed or timed out)"
	case r.State == StateBeyondCaps:
		r.ArchitecturesFrom = "not restricted: released beyond caps, without node affinity from apportion"
	default:
		r.ArchitecturesFrom = "not restricted: the pod carries no decision"
	}
}
