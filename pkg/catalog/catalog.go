// Package catalog maps a strategy group to the Karpenter NodePool that will
// serve it. It reads NodePools the way Karpenter does: requirements from the
// template's requirements and labels plus the karpenter.sh/nodepool label,
// compatibility through Karpenter's own pkg/scheduling, and Karpenter's order
// (highest weight first, then name descending). It holds no client: the
// webhook feeds it from an informer, `apportion plan` from a file
// (ReadNodePools, read.go). Select and SelectFor pick the pool for a group,
// with the tolerations the pod lacks, or say why no pool serves it.
package catalog

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/scheduling"
	nodepoolutils "sigs.k8s.io/karpenter/pkg/utils/nodepool"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// Pool is a NodePool as placement sees it.
type Pool struct {
	Name         string
	Requirements scheduling.Requirements
	Taints       scheduling.Taints
	// Tolerate is the operator's opt-in (annotation apportion.dev/tolerate:
	// "true") to send pods that do not tolerate the pool's taints, adding
	// the tolerations they lack.
	Tolerate bool
}

// NewPool builds the placement view of a NodePool, as Karpenter builds its
// NodeClaim template.
func NewPool(np *karpv1.NodePool) *Pool {
	reqs := scheduling.NewNodeSelectorRequirementsWithMinValues(np.Spec.Template.Spec.Requirements...)
	labels := map[string]string{karpv1.NodePoolLabelKey: np.Name}
	for k, v := range np.Spec.Template.Labels {
		labels[k] = v
	}
	reqs.Add(scheduling.NewLabelRequirements(labels).Values()...)
	return &Pool{
		Name:         np.Name,
		Requirements: reqs,
		// Startup taints are removed once the node is initialised, so
		// only the template's taints decide who may run there.
		Taints:   scheduling.Taints(np.Spec.Template.Spec.Taints),
		Tolerate: strings.EqualFold(np.Annotations[annotations.Tolerate], "true"),
	}
}

// Catalog is an immutable, ordered set of pools.
type Catalog struct {
	pools []*Pool
	// keys are the label keys some pool's requirements or labels name.
	keys sets.Set[string]
}

// New orders the NodePools as Karpenter does and builds the catalog. Pools
// being deleted are left out.
func New(nodePools []*karpv1.NodePool) *Catalog {
	nps := slices.Clone(nodePools)
	nps = slices.DeleteFunc(nps, func(np *karpv1.NodePool) bool { return np.DeletionTimestamp != nil })
	nodepoolutils.OrderByWeight(nps)
	c := &Catalog{pools: make([]*Pool, len(nps)), keys: sets.New[string]()}
	for i, np := range nps {
		c.pools[i] = NewPool(np)
		c.keys.Insert(c.pools[i].Requirements.Keys().UnsortedList()...)
	}
	return c
}

// Undefined returns, in the order given, the label keys that no pool names
// in its requirements or labels and that are not labels Karpenter knows
// (karpv1.WellKnownLabels, which a pool provides without naming them): no
// pool can serve a group that requires one, and a key no one uses is often a
// typo.
func (c *Catalog) Undefined(keys ...string) []string {
	var out []string
	for _, k := range keys {
		if !c.keys.Has(k) && !karpv1.WellKnownLabels.Has(k) {
			out = append(out, k)
		}
	}
	return out
}

// Len is the number of pools.
func (c *Catalog) Len() int { return len(c.pools) }

// Choice is the pool a group goes to, with the tolerations the pod must gain
// to land there (empty when it already tolerates the pool's taints).
type Choice struct {
	Pool        *Pool
	Tolerations []corev1.Toleration
}

// Unused puts first in err the label keys of a group that nothing carries,
// where says what was looked at ("no NodePool and no node"): a key no one
// uses is most often a typo, and reading it first saves reading every
// pool's mismatch. err itself when keys is empty.
func Unused(err error, keys []string, where string) error {
	switch len(keys) {
	case 0:
		return err
	case 1:
		return fmt.Errorf("label key %q is on %s (a typo?); %w", keys[0], where, err)
	}
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = strconv.Quote(k)
	}
	return fmt.Errorf("label keys %s are on %s (typos?); %w", strings.Join(quoted, ", "), where, err)
}

// ErrNoPool is wrapped by Select when no pool can serve the group.
var ErrNoPool = errors.New("no NodePool can serve the group")

// ErrArchitecture is wrapped when the group itself names an architecture the
// pod's images do not support.
var ErrArchitecture = errors.New("the group's architecture is not one the images support")

// ErrCapacity is wrapped when the pools that could serve the group are all
// out of capacity for now.
var ErrCapacity = errors.New("the NodePools that could serve the group are out of capacity")

// Select returns the first pool, in Karpenter's order, that can provide the
// group's labels and satisfy the pod's own constraints (nodeSelector, required
// node affinity, tolerations). pod may be nil when only the group matters.
// The error explains, per pool, why none fits.
func (c *Catalog) Select(group map[string]string, pod *corev1.Pod) (Choice, error) {
	return c.SelectFor(group, pod, nil, nil)
}

// SelectFor is Select for a pod whose images run only on archs (empty: no
// constraint): the pool must also provide one of them. A pool for which out
// returns an error (out of capacity) is passed over for the next; out may be
// nil.
func (c *Catalog) SelectFor(group map[string]string, pod *corev1.Pod, archs []string, out func(pool string) error) (Choice, error) {
	groupReqs, podReqs, err := requirements(group, pod, archs)
	if err != nil {
		return Choice{}, err
	}
	var have []corev1.Toleration
	if pod != nil {
		have = pod.Spec.Tolerations
	}
	var reasons []string
	skipped := false
	for _, p := range c.pools {
		tolerations, reason := p.serves(groupReqs, podReqs, have)
		if reason != "" {
			reasons = append(reasons, p.Name+": "+reason)
			continue
		}
		if out != nil {
			if err := out(p.Name); err != nil {
				skipped = true
				reasons = append(reasons, fmt.Sprintf("%s: %v", p.Name, err))
				continue
			}
		}
		return Choice{Pool: p, Tolerations: tolerations}, nil
	}
	if skipped {
		return Choice{}, fmt.Errorf("%w: %s", ErrCapacity, strings.Join(reasons, "; "))
	}
	if len(c.pools) == 0 {
		return Choice{}, fmt.Errorf("%w: there are no NodePools", ErrNoPool)
	}
	return Choice{}, fmt.Errorf("%w: %s", ErrNoPool, strings.Join(relevant(reasons), "; "))
}

// The reasons a pool cannot serve a group start with groupMismatch (it does
// not provide the group's labels) or podMismatch (not the pod's own
// constraints); any other (a taint not opted in) is about a pool that was
// otherwise a fit.
const (
	groupMismatch = "group: "
	podMismatch   = "pod: "
)

// relevant orders the reasons from the pools that came closest to serving
// the group: first those that fit but for a taint not opted in (what to
// fix, usually), then those with the group's labels that the pod's own
// constraints rule out; the pools without the group's labels are only
// counted, unless no pool has them (a typo in the strategy, say), when each
// one's reason stays. On a cluster of many NodePools, the one that should
// have served the group is what a reader looks for, and a cut message
// (Events are bounded) keeps it.
func relevant(reasons []string) []string {
	var fit, pod, group []string
	for _, r := range reasons {
		switch _, why, _ := strings.Cut(r, ": "); {
		case strings.HasPrefix(why, groupMismatch):
			group = append(group, r)
		case strings.HasPrefix(why, podMismatch):
			pod = append(pod, r)
		default:
			fit = append(fit, r)
		}
	}
	if len(fit)+len(pod) == 0 {
		return group
	}
	out := slices.Concat(fit, pod)
	switch len(group) {
	case 0:
		return out
	case 1:
		return append(out, "1 other NodePool does not provide the group's labels")
	}
	return append(out, fmt.Sprintf("%d other NodePools do not provide the group's labels", len(group)))
}

// requirements are the group's labels, with the images' architectures, and
// the pod's own constraints (nil without a pod); an error when the
// architectures rule out the group or the pod before any pool is looked at.
func requirements(group map[string]string, pod *corev1.Pod, archs []string) (groupReqs, podReqs scheduling.Requirements, err error) {
	groupReqs = scheduling.NewLabelRequirements(group)
	if len(archs) > 0 {
		if arch, ok := group[corev1.LabelArchStable]; ok && !slices.Contains(archs, arch) {
			return nil, nil, fmt.Errorf("%w: %s=%s, images: %s", ErrArchitecture, corev1.LabelArchStable, arch, strings.Join(archs, ","))
		}
		groupReqs.Add(scheduling.NewRequirement(corev1.LabelArchStable, corev1.NodeSelectorOpIn, archs...))
	}
	if pod == nil {
		return groupReqs, nil, nil
	}
	podReqs = scheduling.NewStrictPodRequirements(pod)
	// Checked pool by pool, the pod's own architecture and the images'
	// could each fit a pool that allows every architecture.
	if len(archs) > 0 && podReqs.Has(corev1.LabelArchStable) &&
		!slices.ContainsFunc(archs, podReqs.Get(corev1.LabelArchStable).Has) {
		return nil, nil, fmt.Errorf("%w: the pod requires %s %s, images: %s", ErrArchitecture,
			corev1.LabelArchStable, podReqs.Get(corev1.LabelArchStable), strings.Join(archs, ","))
	}
	return groupReqs, podReqs, nil
}

// serves returns the tolerations a pod holding have needs on the pool, or
// why the pool cannot serve the group or the pod.
func (p *Pool) serves(groupReqs, podReqs scheduling.Requirements, have []corev1.Toleration) ([]corev1.Toleration, string) {
	if err := p.Requirements.Compatible(groupReqs, scheduling.AllowUndefinedWellKnownLabels); err != nil {
		return nil, groupMismatch + err.Error()
	}
	if podReqs != nil {
		if err := p.Requirements.Compatible(podReqs, scheduling.AllowUndefinedWellKnownLabels); err != nil {
			return nil, podMismatch + err.Error()
		}
	}
	tolerations := missingTolerations(p.Taints, have)
	if len(tolerations) > 0 && !p.Tolerate {
		return nil, fmt.Sprintf("tainted and not opted in with %s: \"true\"", annotations.Tolerate)
	}
	return tolerations, ""
}

// missingTolerations returns a toleration for each taint the given
// tolerations do not already cover.
func missingTolerations(taints scheduling.Taints, have []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for i := range taints {
		if (scheduling.Taints{taints[i]}).Tolerates(have) == nil {
			continue
		}
		t := taints[i]
		out = append(out, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpEqual, Value: t.Value, Effect: t.Effect})
		if t.Value == "" {
			out[len(out)-1].Operator = corev1.TolerationOpExists
		}
	}
	return out
}

// PoolName is the chosen pool's name, or "" when there is none (node-label
// mode).
func (c Choice) PoolName() string {
	if c.Pool == nil {
		return ""
	}
	return c.Pool.Name
}
