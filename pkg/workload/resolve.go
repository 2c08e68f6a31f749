package workload

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Chain is what resolution reads of a workload: the object at the top of the
// owner chain apportion follows, the CronJob above a Job, and the
// annotations its pods carry. The webhook and the controllers build it from
// a pod and the metadata caches (Resolve); plan from manifests and explain
// from the API server build it from the workload object (ResolveChain).
// Both then get the same answer.
type Chain struct {
	// Top is the workload, with its GroupVersionKind, name, labels and
	// annotations.
	Top *metav1.PartialObjectMetadata
	// Parent is the CronJob above a Job; nil otherwise.
	Parent *metav1.PartialObjectMetadata
	// Template are the annotations the workload's pods carry: a pod's
	// own, or the pod template's.
	Template map[string]string
	// TemplateAt is where the pods' annotations are written on Top
	// ("spec.template.metadata.annotations" when empty).
	TemplateAt string
	// Ref and RefTemplate are the WorkflowTemplate a Workflow names ("Kind
	// name") and its spec.podMetadata annotations, which Argo gives the
	// Workflow's pods under the Workflow's own. A pod carries them
	// already: only explain, which reads the Workflow, sets them.
	Ref         string
	RefTemplate map[string]string
}

// batch reports whether the chain's pods run to completion: a Job's or a
// Workflow's. Their pods' own annotations come first.
func (c *Chain) batch() bool {
	k := c.Top.GroupVersionKind()
	return k == JobGVK || k == WorkflowGVK
}

func (c *Chain) templateAt() string {
	if c.TemplateAt != "" {
		return c.TemplateAt
	}
	return "spec.template.metadata.annotations"
}

// ResolveChain answers for a workload what Resolve answers for one of its
// pods: the strategy, its source, the mode, the opt-out and every problem
// of the annotations. It reads policies through the PolicySource only.
func ResolveChain(ctx context.Context, namespace string, chain Chain, opts ...Option) (*Info, error) {
	var o resolveOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.resolve(ctx, namespace, &chain)
}

// Resolve follows the pod's owners through the metadata caches. namespace is
// the pod's namespace as the admission request gives it (a pod being created
// with generateName may not carry it yet). It returns ErrNotCached when an
// owner is missing from the cache, and (nil, nil) for pods without a
// workload apportion follows.
func Resolve(ctx context.Context, r client.Reader, namespace string, pod *corev1.Pod, opts ...Option) (*Info, error) {
	var o resolveOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.resolvePod(ctx, r, namespace, pod, metav1.GetControllerOfNoCopy(pod))
}

// resolvePod is Resolve for the pod's controller owner (nil: none).
func (o *resolveOptions) resolvePod(ctx context.Context, r client.Reader, namespace string, pod *corev1.Pod, owner *metav1.OwnerReference) (*Info, error) {
	if owner == nil {
		return nil, nil
	}
	var revision string
	top, parent, err := owners(ctx, r, namespace, pod, owner, &revision)
	if err != nil || top == nil {
		return nil, err
	}
	info, err := o.resolve(ctx, namespace, &Chain{Top: top, Parent: parent, Template: pod.Annotations})
	if info != nil {
		info.Revision = revision
	}
	return info, err
}

// resolve is the one resolution every surface asks: annotations first (a
// batch owner's pods', then its own, then its CronJob's; any other
// workload's own, then its pod template's), then the oldest PlacementPolicy
// targeting the workload, then one targeting its CronJob, then the
// highest-ranked ClusterPlacementPolicy covering the workload, then one
// covering its CronJob.
func (o *resolveOptions) resolve(ctx context.Context, namespace string, c *Chain) (*Info, error) {
	top, parent := c.Top, c.Parent
	info := &Info{Workload: Ref{Kind: top.GroupVersionKind().Kind, Namespace: namespace, Name: top.Name, UID: top.UID}}
	if parent != nil {
		info.Parent = Ref{Kind: parent.GroupVersionKind().Kind, Namespace: namespace, Name: parent.Name, UID: parent.UID}
	}
	levels := c.levels()
	findStrategy(info, c)
	info.Skip = anyLevel(levels, annotations.Skip, isTrue)
	policyMode, err := o.fromPolicies(ctx, namespace, c, info)
	if err != nil {
		return nil, err
	}
	info.Mode, info.ModeSource = annotations.ModeRequired, ""
	if m, ok := annotations.ParseMode(o.defaultMode); ok {
		info.Mode = m
	}
	if m, ok := annotations.ParseMode(policyMode); ok {
		info.Mode, info.ModeSource = m, info.Source.String()+" spec.mode"
	}
	// The last level that sets a valid mode wins: levels run from the
	// CronJob down to the pods. An out-of-range value is passed over (and
	// reported among the problems).
	for _, l := range levels {
		if m, ok := annotations.ParseMode(l.annotations[annotations.Mode]); ok {
			info.Mode, info.ModeSource = m, l.where+"["+annotations.Mode+"]"
		}
	}
	info.CapacityTimeout = firstLevel(levels, annotations.CapacityTimeout)
	info.ArchitecturesAuto = anyLevel(levels, annotations.Architectures, IsArchitecturesAuto)
	info.Rebalance = anyLevel(levels, annotations.Rebalance, isTrue)
	for i := len(levels) - 1; i >= 0; i-- {
		for _, p := range annotations.Check(levels[i].annotations) {
			p.Where = levels[i].where
			info.Problems = append(info.Problems, p)
		}
	}
	if o.validate && info.Found {
		if _, err := strategy.Parse(info.Strategy); err != nil && info.Invalid == "" {
			info.Invalid = err.Error()
		}
	}
	return info, nil
}

// level is one place annotations are read from, with where it is for a
// message.
type level struct {
	annotations map[string]string
	where       string
}

// levels are the chain's annotations from the CronJob down to the pods:
// each level overrides those before it.
func (c *Chain) levels() []level {
	out := make([]level, 0, 4)
	if c.Parent != nil {
		out = append(out, level{c.Parent.Annotations, c.Parent.GroupVersionKind().Kind + " " + c.Parent.Name + " metadata.annotations"})
	}
	out = append(out, level{c.Top.Annotations, c.Top.GroupVersionKind().Kind + " " + c.Top.Name + " metadata.annotations"})
	if c.Ref != "" {
		out = append(out, level{c.RefTemplate, c.Ref + " " + c.templateAt()})
	}
	return append(out, level{c.Template, c.Top.GroupVersionKind().Kind + " " + c.Top.Name + " " + c.templateAt()})
}

func anyLevel(levels []level, key string, is func(string) bool) bool {
	for _, l := range levels {
		if is(l.annotations[key]) {
			return true
		}
	}
	return false
}

// firstLevel is the value of key at the lowest level that has it.
func firstLevel(levels []level, key string) string {
	for i := len(levels) - 1; i >= 0; i-- {
		if v, ok := levels[i].annotations[key]; ok {
			return v
		}
	}
	return ""
}

// findStrategy gives info the strategy written on the chain. A batch pod's
// own annotations (its template's, and for a Workflow its spec.podMetadata,
// which Argo copies onto each pod) come first, then its WorkflowTemplate's,
// then the Job's or Workflow's (a CronJob's jobTemplate annotations are
// copied onto each Job), then the CronJob's. For the other kinds the
// workload's own come first.
func findStrategy(info *Info, c *Chain) {
	if !c.batch() {
		// The pod's own annotations are its template's: the template level.
		info.Strategy, info.Source, info.Found = strategy.Find(c.Top.Annotations, c.Template)
		return
	}
	if info.Strategy, info.Source, info.Found = strategy.Find(nil, c.Template); info.Found {
		return
	}
	if info.Strategy, info.Source, info.Found = strategy.Find(nil, c.RefTemplate); info.Found {
		info.Source.Owner = c.Ref
		return
	}
	if info.Strategy, info.Source, info.Found = strategy.Find(c.Top.Annotations, nil); info.Found || c.Parent == nil {
		return
	}
	info.Strategy, info.Source, info.Found = strategy.Find(c.Parent.Annotations, nil)
	info.Source.Owner = c.Parent.GroupVersionKind().Kind + " " + c.Parent.Name
}

// candidate is a policy that may place the chain; parent is true for one
// of the CronJob above a Job.
type candidate struct {
	Policy
	parent bool
}

// fromPolicies gives info the strategy of the policy that places the chain,
// when it has none of its own, and returns that policy's mode. A namespace's
// PlacementPolicies come before every ClusterPlacementPolicy, the Job's
// before its CronJob's: teams keep the last word. With WithExplanations it
// also says, in info.Why, what the winner wins over.
func (o *resolveOptions) fromPolicies(ctx context.Context, namespace string, c *Chain, info *Info) (string, error) {
	if o.policies == nil || (info.Found && !o.explain) {
		return "", nil
	}
	var namespaced *candidate
	var cluster []candidate
	for i, t := range []*metav1.PartialObjectMetadata{c.Top, c.Parent} {
		if t == nil {
			continue
		}
		ps, err := o.policies.Candidates(ctx, namespace, t)
		if err != nil {
			return "", err
		}
		covered := len(cluster) > 0
		for _, p := range ps {
			switch {
			case !p.Cluster && namespaced == nil:
				namespaced = &candidate{p, i == 1}
			case p.Cluster && !covered:
				// The cluster policies covering the Job, else
				// those covering its CronJob.
				cluster = append(cluster, candidate{p, i == 1})
			}
		}
	}
	winner := namespaced
	if winner == nil && len(cluster) > 0 {
		winner = &cluster[0]
	}
	if o.explain {
		info.Why = why(info, c, winner, cluster)
	}
	if info.Found || winner == nil {
		return "", nil
	}
	p := winner.Policy
	info.Strategy, info.Source, info.Found = p.Strategy, strategy.Source{Policy: p.Name, Cluster: p.Cluster}, true
	info.Invalid = p.Invalid
	// A cluster policy may keep its workloads from opting out.
	if info.Skip && p.NoSkip {
		info.Skip, info.SkipRefused = false, true
	}
	return p.Mode, nil
}

// why says why the policy that places the chain wins, or what its own
// annotation wins over.
func why(info *Info, c *Chain, winner *candidate, cluster []candidate) string {
	if len(cluster) > 0 && cluster[0].parent && (info.Found || !winner.Cluster) {
		cluster = nil // covering the CronJob only: nothing that lost to the winner
	}
	var parts []string
	if !info.Found && winner != nil && winner.parent {
		parts = append(parts, "no annotation and no policy of its own: the policy of its "+c.Parent.GroupVersionKind().Kind+" "+c.Parent.Name+" applies")
	}
	switch {
	case len(cluster) == 0:
	case info.Found:
		parts = append(parts, "its own annotation wins over "+names(cluster))
	case !winner.Cluster:
		parts = append(parts, "a PlacementPolicy of the namespace wins over "+names(cluster))
	default:
		p := cluster[0]
		parts = append(parts, fmt.Sprintf("no annotation and no PlacementPolicy of namespace %s; it covers the namespace by its labels, priority %d", info.Workload.Namespace, p.Priority))
		var tied, lower []candidate
		for _, q := range cluster[1:] {
			if q.Priority == p.Priority {
				tied = append(tied, q)
			} else {
				lower = append(lower, q)
			}
		}
		if len(tied) > 0 {
			parts = append(parts, "ties with "+names(tied)+": the oldest, then the first by name, wins")
		}
		if len(lower) > 0 {
			parts = append(parts, "over "+names(lower))
		}
	}
	return strings.Join(parts, "; ")
}

// names are cluster policies as "ClusterPlacementPolicy a (priority 2)" or
// "ClusterPlacementPolicies a (priority 2), b (priority 1)".
func names(ps []candidate) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s (priority %d)", p.Name, p.Priority)
	}
	kind := "ClusterPlacementPolicy "
	if len(ps) > 1 {
		kind = "ClusterPlacementPolicies "
	}
	return kind + strings.Join(parts, ", ")
}
