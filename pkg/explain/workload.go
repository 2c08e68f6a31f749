package explain

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/split"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// WorkloadReport is a workload's placement now.
type WorkloadReport struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	// The resolution: strategy, source, why, mode, what keeps its pods
	// from being placed, problems; as `apportion plan -f` says it of the
	// same objects.
	workload.Answer
	// Revision is the current revision (pod-template-hash or
	// controller-revision-hash): what the counts and Next are about.
	Revision string `json:"revision,omitempty"`
	// Replicas, Running, Unmatched and BeyondCaps are the split's:
	// BeyondCaps is the number of pods past every cap at Replicas, placed
	// without a group.
	Replicas   int64 `json:"replicas"`
	Running    int64 `json:"running"`
	Unmatched  int64 `json:"unmatched,omitempty"`
	BeyondCaps int64 `json:"beyondCaps,omitempty"`
	// Groups are the strategy's groups, in order.
	Groups      []GroupReport `json:"groups,omitempty"`
	WithinQuota bool          `json:"withinQuota"`
	// Drift says, one line each, why the Running split is off the
	// strategy; empty when it is not.
	Drift []string `json:"drift,omitempty"`
	// Pods counts the workload's live pods by what apportion did.
	Pods PodCounts `json:"pods"`
	// Next are the group keys the next pods of the current revision would
	// get, in order; NextBeyondCaps for a pod beyond caps.
	Next []string `json:"next,omitempty"`
}

// GroupReport is one group of a workload's strategy.
type GroupReport struct {
	split.Group
	// NodePool serves the group now ("" without Karpenter or when left
	// out).
	NodePool string `json:"nodePool,omitempty"`
	// Decided counts the current revision's live pods apportion placed in
	// the group; Shadow those it would have placed there (shadow mode);
	// Strays its pods admitted without a decision that run on the group's
	// nodes (a workload no longer in shadow mode counts its shadow pods
	// there).
	Decided int64 `json:"decided"`
	Shadow  int64 `json:"shadow,omitempty"`
	Strays  int64 `json:"strays,omitempty"`
}

// PodCounts counts a workload's live pods.
type PodCounts struct {
	Live int64 `json:"live"`
	// Decided carry apportion's decision, Shadow a shadow decision;
	// Waiting still hold the placement gate; Strays are bound without a
	// decision; BeyondCaps were released without a group, every group at
	// its cap; Fallback were placed while a group was out of capacity;
	// OtherRevisions belong to older (or newer) revisions.
	Decided        int64 `json:"decided"`
	Shadow         int64 `json:"shadow,omitempty"`
	Waiting        int64 `json:"waiting,omitempty"`
	Strays         int64 `json:"strays,omitempty"`
	BeyondCaps     int64 `json:"beyondCaps,omitempty"`
	Fallback       int64 `json:"fallback,omitempty"`
	OtherRevisions int64 `json:"otherRevisions,omitempty"`
}

// Workload reports on the workload ref names.
func (c *Cluster) Workload(ctx context.Context, ref Ref) (*WorkloadReport, error) {
	obj, err := c.object(ctx, ref)
	if err != nil {
		return nil, err
	}
	pods, err := c.pods(ctx, obj)
	if err != nil {
		return nil, err
	}
	if obj.batch {
		// A Job or Workflow is split over its live pods.
		obj.replicas = int64(len(pods))
	}
	return c.report(ctx, obj, pods)
}

// report computes the report of o from its live pods.
func (c *Cluster) report(ctx context.Context, o *object, pods []*corev1.Pod) (*WorkloadReport, error) {
	r := &WorkloadReport{Namespace: o.meta.Namespace, Kind: o.meta.Kind, Name: o.meta.Name, Revision: o.revision, Replicas: o.replicas}
	if err := c.strategyOf(ctx, o, r); err != nil {
		return nil, err
	}
	if r.ModeSource == "" {
		// The install's default mode is not known here: its pods say.
		r.Mode = inferMode(pods)
	}
	if r.NotPlaced != "" {
		r.Pods = countPods(pods, nil, o.revision, nil)
		return r, nil
	}
	s, err := compiled.Parse(r.Strategy)
	if err != nil {
		r.NotPlaced, r.Invalid = workload.NotPlacedInvalid, err.Error()
		return r, nil
	}
	nodes, err := c.nodeLabels(ctx, pods)
	if err != nil {
		return nil, err
	}
	leftOut, pools, err := c.leftOut(ctx, s, o, pods)
	if err != nil {
		return nil, err
	}
	in := split.Input{Strategy: s, Replicas: o.replicas, LeftOut: leftOut}
	for _, p := range pods {
		switch {
		case p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "":
		case decision.ReleasedBeyondCaps(p):
			in.BeyondCaps++
		default:
			in.NodeLabels = append(in.NodeLabels, nodes[p.Spec.NodeName])
		}
	}
	sp := split.Compute(in)
	r.Running, r.Unmatched, r.BeyondCaps, r.WithinQuota = sp.Running, sp.Unmatched, sp.BeyondCaps, sp.WithinQuota
	r.Groups = make([]GroupReport, len(sp.Groups))
	for i, g := range sp.Groups {
		r.Groups[i] = GroupReport{Group: g, NodePool: pools[i]}
	}
	groupOf := split.Matcher(s)
	onNode := func(p *corev1.Pod) int {
		if l, ok := nodes[p.Spec.NodeName]; ok && l != nil {
			return groupOf(l)
		}
		return -1 // unbound, or its node unknown
	}
	r.Pods = countPods(pods, s, o.revision, onNode)
	r.countGroups(pods, s, o.revision, onNode)
	if r.Mode != annotations.ModeShadow {
		r.Drift = driftReasons(sp)
	}
	counts := make([]int64, len(s.Strategy.Groups))
	for i, g := range r.Groups {
		if r.Mode == annotations.ModeShadow {
			counts[i] = g.Shadow
		} else {
			counts[i] = g.Decided + g.Strays
		}
	}
	for _, gi := range split.Next(s, counts, split.Available(leftOut, len(counts)), NextPods) {
		if gi < 0 {
			r.Next = append(r.Next, NextBeyondCaps)
			continue
		}
		r.Next = append(r.Next, s.Strategy.Groups[gi].Key())
	}
	return r, nil
}

// countGroups counts the current revision's decided, shadow and stray pods
// per group; out of shadow mode, a bound shadow pod is a stray.
func (r *WorkloadReport) countGroups(pods []*corev1.Pod, s *compiled.Strategy, revision string, onNode func(*corev1.Pod) int) {
	for _, p := range pods {
		if revision != "" && revisionOf(p) != revision {
			continue
		}
		gi, kind := classify(p, s, onNode)
		if kind == podShadow && r.Mode != annotations.ModeShadow {
			// The workload left shadow mode without a rollout: the
			// shadow decision changed nothing, and the pod counts
			// where it runs (nowhere until bound), as the placement
			// controller counts it.
			gi, kind = onNode(p), podStray
		}
		if gi < 0 {
			continue // a group the strategy no longer has, or a node of none
		}
		switch kind {
		case podDecided:
			r.Groups[gi].Decided++
		case podShadow:
			r.Groups[gi].Shadow++
		case podStray:
			r.Groups[gi].Strays++
		}
	}
}

// inferMode is the mode of a workload that sets none: the install's
// default, told from what its pods carry.
func inferMode(pods []*corev1.Pod) string {
	for _, p := range slices.Backward(pods) {
		if _, ok := p.Annotations[annotations.Shadow]; ok {
			return annotations.ModeShadow
		}
		if _, ok := p.Annotations[annotations.Group]; ok {
			break
		}
	}
	return annotations.ModeRequired
}

// leftOut asks Capacity which groups can be served now, for a pod of the
// workload's template (the user's own constraints: a placed pod's carry its
// decision's) with the architectures the newest decision of the current
// revision recorded; and the NodePool serving each group.
func (c *Cluster) leftOut(ctx context.Context, s *compiled.Strategy, o *object, pods []*corev1.Pod) (leftOut, pools []string, err error) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.meta.Namespace, Annotations: o.template.Annotations, Labels: o.template.Labels}, Spec: o.template.Spec}
	var archs []string
	for _, p := range slices.Backward(pods) {
		if o.revision == "" || revisionOf(p) == o.revision {
			if a := p.Annotations[annotations.Architectures]; a != "" && a != annotations.ArchitecturesAuto {
				archs = strings.Split(a, ",")
				break
			}
		}
	}
	choices, errs, err := c.Capacity.Choose(ctx, s.Strategy, pod, archs, string(o.meta.UID))
	if err != nil {
		return nil, nil, err
	}
	leftOut, pools = make([]string, len(errs)), make([]string, len(errs))
	for i, e := range errs {
		if e != nil {
			leftOut[i] = e.Error()
			continue
		}
		pools[i] = choices[i].PoolName()
	}
	return leftOut, pools, nil
}

// nodeLabels reads the labels of the nodes the pods are bound to.
func (c *Cluster) nodeLabels(ctx context.Context, pods []*corev1.Pod) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, p := range pods {
		name := p.Spec.NodeName
		if _, seen := out[name]; seen || name == "" {
			continue
		}
		n := &metav1.PartialObjectMetadata{}
		n.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
		if err := c.Reader.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			if client.IgnoreNotFound(err) != nil {
				return nil, fmt.Errorf("reading node %s: %w", name, err)
			}
		}
		out[name] = n.Labels
	}
	return out, nil
}

type podKind int

const (
	podOther podKind = iota
	podDecided
	podShadow
	podWaiting
	podStray
	podBeyondCaps
)

// classify tells what apportion did with p and the group (index in s, -1
// when unknown) it counts in: its decision's or shadow decision's group, or
// for a stray the group of its node; none for a pod released beyond caps,
// whatever its node.
func classify(p *corev1.Pod, s *compiled.Strategy, onNode func(*corev1.Pod) int) (int, podKind) {
	index := func(key string) int {
		if i, ok := s.Index[key]; ok {
			return i
		}
		return -1
	}
	if g, ok := p.Annotations[annotations.Group]; ok {
		if gi := index(g); gi >= 0 {
			return gi, podDecided
		}
		return -1, podDecided
	}
	if sh, ok := decision.ReadShadow(p); ok {
		return index(sh.Group), podShadow
	}
	if decision.HasGate(p) {
		return -1, podWaiting
	}
	if decision.ReleasedBeyondCaps(p) {
		return -1, podBeyondCaps
	}
	if p.Spec.NodeName != "" {
		if gi := onNode(p); gi >= 0 {
			return gi, podStray
		}
		return -1, podStray
	}
	return -1, podOther
}

// countPods counts pods by what apportion did with them.
func countPods(pods []*corev1.Pod, s *compiled.Strategy, revision string, onNode func(*corev1.Pod) int) PodCounts {
	var n PodCounts
	for _, p := range pods {
		n.Live++
		if _, ok := p.Annotations[annotations.Fallback]; ok {
			n.Fallback++
		}
		if revision != "" && revisionOf(p) != revision {
			n.OtherRevisions++
		}
		if s == nil {
			continue
		}
		switch _, kind := classify(p, s, onNode); kind {
		case podDecided:
			n.Decided++
		case podShadow:
			n.Shadow++
		case podWaiting:
			n.Waiting++
		case podStray:
			n.Strays++
		case podBeyondCaps:
			n.BeyondCaps++
		}
	}
	return n
}

// driftReasons says why sp is off its strategy.
func driftReasons(sp split.Split) []string {
	var out []string
	for i, g := range sp.Groups {
		switch {
		case g.LeftOut != "":
			out = append(out, fmt.Sprintf("group %d (%s) is left out: %s", i+1, g.Key, g.LeftOut))
		case !sp.WithinQuota && !g.Within():
			out = append(out, fmt.Sprintf("group %d (%s) has %d running, its quota at %d running is %s", i+1, g.Key, g.Actual, sp.Running-sp.Unmatched, split.Bounds(g.Min, g.Max)))
		}
	}
	if sp.Unmatched > 0 && !sp.WithinQuota {
		out = append(out, fmt.Sprintf("%d running on nodes of no group", sp.Unmatched))
	}
	return out
}
