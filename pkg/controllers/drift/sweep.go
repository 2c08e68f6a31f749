package drift

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/compiled"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/split"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// kinds are the GroupVersionKinds of the workload kinds Resolve returns.
var kinds = map[string]schema.GroupVersionKind{
	workload.DeploymentGVK.Kind:  workload.DeploymentGVK,
	workload.StatefulSetGVK.Kind: workload.StatefulSetGVK,
	workload.ReplicaSetGVK.Kind:  workload.ReplicaSetGVK,
	workload.RolloutGVK.Kind:     workload.RolloutGVK,
	workload.JobGVK.Kind:         workload.JobGVK,
	workload.WorkflowGVK.Kind:    workload.WorkflowGVK,
}

// placed reports whether apportion places the workload's pods by a
// strategy, which makes it one drift watches. A workload in shadow mode,
// which apportion only observes without placing its pods, is not.
func placed(info *workload.Info) bool {
	return info != nil && info.Found && !info.Skip && !info.Shadow()
}

// observed is one placed workload as a sweep sees it.
type observed struct {
	info *workload.Info
	// pods are its live pods (not Succeeded or Failed).
	pods []*corev1.Pod
}

// Sweep looks at every placed workload once: it computes its split,
// updates its drift and its series, records the Events due, and forgets
// the workloads it no longer sees.
func (c *Controller) Sweep(ctx context.Context) error {
	workloads, err := c.workloads(ctx)
	if err != nil {
		return err
	}
	nodes := nodeLabels{c: c, labels: map[string]map[string]string{}}
	type result struct {
		info    *workload.Info
		sp      split.Split
		settled bool
		keep    bool // unreadable now: keep what is known
	}
	results := map[types.UID]result{}
	for uid, w := range workloads {
		sp, settled, ok, err := c.observe(ctx, w, &nodes)
		switch {
		case err != nil:
			log.FromContext(ctx).Error(err, "drift: reading a workload", "workload", w.info.Workload.String())
			if _, known := c.tracked[uid]; known {
				results[uid] = result{keep: true}
			}
		case ok:
			results[uid] = result{info: w.info, sp: sp, settled: settled}
		}
	}
	// The workloads gone first: a workload recreated under the same name
	// has series of the same labels.
	for uid, t := range c.tracked {
		if _, ok := results[uid]; !ok {
			t.forget(c)
			delete(c.tracked, uid)
		}
	}
	for _, r := range results {
		if !r.keep {
			c.update(ctx, r.info, r.sp, r.settled)
		}
	}
	c.exportCount()
	return nil
}

// workloads groups the live pods of the placed workloads by workload. It
// walks the controllers of pods (Options.Controllers, from the metadata
// caches) and reads their pods through the pod index by controller: one
// live pod resolves the controller's workload, as placement resolves it,
// and only a placed workload's pods are read in full. The pods of a
// controller share a workload and its strategy: each is resolved once.
func (c *Controller) workloads(ctx context.Context) (map[types.UID]*observed, error) {
	out := map[types.UID]*observed{}
	for _, gvk := range c.opts.Controllers {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.kube.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		for i := range list.Items {
			owner := &list.Items[i]
			pod, err := c.firstLive(ctx, owner)
			if err != nil {
				return nil, err
			}
			if pod == nil {
				continue
			}
			info, err := workload.Resolve(ctx, c.kube, pod.Namespace, pod, c.opts.Resolve...)
			if err != nil {
				// Not cached yet (a new ReplicaSet) or unreadable: this
				// controller's pods wait for the next sweep.
				if !errors.Is(err, workload.ErrNotCached) {
					log.FromContext(ctx).Error(err, "drift: resolving a pod's workload", "pod", pod.Namespace+"/"+pod.Name)
				}
				continue
			}
			if !placed(info) {
				continue
			}
			pods, err := c.livePods(ctx, owner)
			if err != nil {
				return nil, err
			}
			w := out[info.Workload.UID]
			if w == nil {
				w = &observed{info: info}
				out[info.Workload.UID] = w
			}
			w.pods = append(w.pods, pods...)
		}
	}
	return out, nil
}

// firstLive is a live pod of owner, nil when it has none. Most often its
// first pod is: one pod read, however many it has.
func (c *Controller) firstLive(ctx context.Context, owner *metav1.PartialObjectMetadata) (*corev1.Pod, error) {
	var probe corev1.PodList
	if err := c.kube.List(ctx, &probe, client.InNamespace(owner.Namespace), client.MatchingFields{podcache.IndexController: string(owner.UID)}, client.Limit(1)); err != nil {
		return nil, fmt.Errorf("listing pods of %s/%s: %w", owner.Namespace, owner.Name, err)
	}
	if len(probe.Items) == 0 {
		return nil, nil
	}
	if live(&probe.Items[0]) {
		return &probe.Items[0], nil
	}
	pods, err := c.livePods(ctx, owner)
	if err != nil || len(pods) == 0 {
		return nil, err
	}
	return pods[0], nil
}

// livePods reads the live pods that owner controls, through the pod index.
// Deep-copied: the cache holds podcache.Pod, which only a copy turns into
// a corev1.Pod.
func (c *Controller) livePods(ctx context.Context, owner *metav1.PartialObjectMetadata) ([]*corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.kube.List(ctx, &pods, client.InNamespace(owner.Namespace), client.MatchingFields{podcache.IndexController: string(owner.UID)}); err != nil {
		return nil, fmt.Errorf("listing pods of %s/%s: %w", owner.Namespace, owner.Name, err)
	}
	var out []*corev1.Pod
	for i := range pods.Items {
		if live(&pods.Items[i]) {
			out = append(out, &pods.Items[i])
		}
	}
	return out, nil
}

// live: not Succeeded or Failed.
func live(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// observe computes the workload's split now, and whether it is settled (a
// sweep that counts). ok is false when there is nothing to report: an
// invalid strategy, or the workload is gone.
func (c *Controller) observe(ctx context.Context, w *observed, nodes *nodeLabels) (sp split.Split, settled, ok bool, err error) {
	info := w.info
	cs, err := c.opts.Strategies.Get(info.Strategy)
	if err != nil {
		return sp, false, false, nil // invalid: placement releases its pods and says so
	}
	gvk, known := kinds[info.Workload.Kind]
	if !known {
		return sp, false, false, nil
	}
	var spec workload.Spec
	if gvk == workload.JobGVK || gvk == workload.WorkflowGVK {
		// A Job or Workflow is split over its live pods: they are its
		// replicas while it runs, and once they are done it is no longer
		// seen, so a finished Job never drifts.
		spec.Replicas = int32(len(w.pods))
	} else if spec, err = workload.ReadSpec(ctx, c.kube, gvk, client.ObjectKey{Namespace: info.Workload.Namespace, Name: info.Workload.Name}); err != nil {
		if apierrors.IsNotFound(err) {
			return sp, false, false, nil
		}
		return sp, false, false, fmt.Errorf("getting %s: %w", info.Workload, err)
	}
	leftOut, err := c.leftOut(ctx, cs, w)
	if err != nil {
		return sp, false, false, err
	}
	in := split.Input{Strategy: cs, Replicas: int64(spec.Replicas), LeftOut: leftOut}
	for _, p := range w.pods {
		if !running(p) {
			continue
		}
		if c.opts.Signer.BeyondCaps(p) {
			in.BeyondCaps++ // in no group, whatever its node
			continue
		}
		l, err := nodes.of(ctx, p.Spec.NodeName)
		if err != nil {
			return sp, false, false, err
		}
		in.NodeLabels = append(in.NodeLabels, l)
	}
	return split.Compute(in), isSettled(w.pods, spec.Replicas), true, nil
}

// leftOut asks Capacity, for one of the workload's pods as it was before
// its decision, why each group is left out now ("" when served).
func (c *Controller) leftOut(ctx context.Context, cs *compiled.Strategy, w *observed) ([]string, error) {
	out := make([]string, len(cs.Strategy.Groups))
	if c.capacity == nil {
		return out, nil
	}
	_, errs, err := c.capacity.Choose(ctx, cs.Strategy, undecided(cs.Strategy, w.pods[0]), nil, string(w.info.Workload.UID))
	if err != nil {
		return nil, fmt.Errorf("choosing NodePools for %s: %w", w.info.Workload, err)
	}
	for i := range out {
		if i < len(errs) && errs[i] != nil {
			out[i] = shorten(errs[i].Error())
		}
	}
	return out, nil
}

// maxReason bounds one group's left-out reason in the Event: the reason
// lists why each NodePool cannot serve the group, and every group's numbers
// must fit in the Event's 1 KiB.
const maxReason = 240

// shorten cuts s to maxReason bytes, on a rune boundary, ending in "...".
func shorten(s string) string {
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// running: the pod counts in the split (as PlacementPolicy status counts).
func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && podutil.IsScheduled(p) && !podutil.IsTerminating(p)
}

// isSettled: every live pod is Running (bound, not terminating), all of one
// revision, and there are replicas of them: no rollout, scale or
// replacement is under way.
func isSettled(pods []*corev1.Pod, replicas int32) bool {
	if int64(len(pods)) != int64(replicas) {
		return false
	}
	revision := ""
	for i, p := range pods {
		if !running(p) {
			return false
		}
		r := revisionOf(p)
		if i == 0 {
			revision = r
		} else if r != revision {
			return false
		}
	}
	return true
}

// revisionOf is the pod's revision: its controller (a ReplicaSet is one
// revision of a Deployment or Rollout) and the controller-revision-hash (a
// StatefulSet's pods of every revision share their controller).
func revisionOf(p *corev1.Pod) string {
	return workload.OwnerKey(p)
}

// undecided is a copy of pod without the required node affinity expressions
// a decision adds on the keys of the strategy's groups and on the NodePool:
// they pin the pod to the group it was placed in, and would leave every
// other group out. The user's other constraints, and the architectures,
// stay.
func undecided(s *strategy.Strategy, pod *corev1.Pod) *corev1.Pod {
	probe := pod.DeepCopy()
	a := probe.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return probe
	}
	drop := map[string]bool{karpv1.NodePoolLabelKey: true}
	for _, g := range s.Groups {
		for _, l := range g.Labels {
			drop[l.Key] = true
		}
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchExpressions = slices.DeleteFunc(terms[i].MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return drop[r.Key] })
	}
	return probe
}

// nodeLabels reads node labels from the node metadata cache, once per node
// per sweep.
type nodeLabels struct {
	c      *Controller
	labels map[string]map[string]string
}

func (n *nodeLabels) of(ctx context.Context, name string) (map[string]string, error) {
	if l, ok := n.labels[name]; ok {
		return l, nil
	}
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := n.c.kube.Get(ctx, client.ObjectKey{Name: name}, node); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting node %s: %w", name, err)
	}
	n.labels[name] = node.Labels
	return node.Labels, nil
}
