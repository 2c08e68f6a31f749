package explain

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

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

// object is what a report reads of the workload object.
type object struct {
	meta     *metav1.PartialObjectMetadata // with its GroupVersionKind
	replicas int64
	selector labels.Selector
	template corev1.PodTemplateSpec
	revision string
	owners   map[types.UID]bool // the pods' controllers: the object, or its ReplicaSets
	// batch is true for a Job or Workflow: split over its live pods, its
	// pods' own annotations first. parent is a Job's CronJob (nil
	// otherwise); templatePath where the pods' annotations are written.
	batch        bool
	parent       *metav1.PartialObjectMetadata
	templatePath string
	// Of a Workflow: the WorkflowTemplate its spec.workflowTemplateRef
	// names ("Kind name") and that template's spec.podMetadata
	// annotations, which Argo gives its pods under the Workflow's own; the
	// CronWorkflow that created it, with its metadata and
	// spec.workflowMetadata annotations (Argo copies the latter onto each
	// Workflow, not the former).
	ref                               string
	refAnnotations                    map[string]string
	cron                              string
	cronAnnotations, cronWorkflowMeta map[string]string
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

// object reads the workload. A ReplicaSet that a Deployment or Rollout
// controls is read as that workload: the strategy is written there.
func (c *Cluster) object(ctx context.Context, ref Ref) (*object, error) {
	key := client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}
	switch ref.Kind {
	case "Deployment":
		d := &appsv1.Deployment{}
		if err := c.Reader.Get(ctx, key, d); err != nil {
			return nil, err
		}
		o := &object{meta: metaOf(&d.ObjectMeta, workload.DeploymentGVK), replicas: int64(ptr.Deref(d.Spec.Replicas, 1)), template: d.Spec.Template}
		return o, c.replicaSets(ctx, o, d.Spec.Selector, "deployment.kubernetes.io/revision")
	case "StatefulSet":
		s := &appsv1.StatefulSet{}
		if err := c.Reader.Get(ctx, key, s); err != nil {
			return nil, err
		}
		o := &object{meta: metaOf(&s.ObjectMeta, workload.StatefulSetGVK), replicas: int64(ptr.Deref(s.Spec.Replicas, 1)), template: s.Spec.Template,
			revision: s.Status.UpdateRevision, owners: map[types.UID]bool{s.UID: true}}
		return o, o.setSelector(s.Spec.Selector)
	case "ReplicaSet":
		rs := &appsv1.ReplicaSet{}
		if err := c.Reader.Get(ctx, key, rs); err != nil {
			return nil, err
		}
		if up := metav1.GetControllerOfNoCopy(rs); up != nil && (workload.Is(up, workload.DeploymentGVK) || workload.Is(up, workload.RolloutGVK)) {
			return c.object(ctx, Ref{Kind: up.Kind, Namespace: ref.Namespace, Name: up.Name})
		}
		o := &object{meta: metaOf(&rs.ObjectMeta, workload.ReplicaSetGVK), replicas: int64(ptr.Deref(rs.Spec.Replicas, 1)), template: rs.Spec.Template,
			revision: rs.Labels[workload.PodTemplateHashLabel], owners: map[types.UID]bool{rs.UID: true}}
		return o, o.setSelector(rs.Spec.Selector)
	case "Rollout":
		if !c.Rollouts {
			return nil, fmt.Errorf("%w: the cluster serves no Argo Rollouts", ErrUsage)
		}
		return c.rollout(ctx, key)
	case "Job":
		return c.job(ctx, key)
	case "Workflow":
		if !c.Workflows {
			return nil, fmt.Errorf("%w: the cluster serves no Argo Workflows", ErrUsage)
		}
		return c.workflow(ctx, key)
	}
	return nil, fmt.Errorf("%w: %s is not a workload", ErrUsage, ref.Kind)
}

func metaOf(m *metav1.ObjectMeta, gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{ObjectMeta: *m}
	obj.SetGroupVersionKind(gvk)
	return obj
}

func (o *object) setSelector(sel *metav1.LabelSelector) error {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return fmt.Errorf("%s %s: spec.selector: %w", o.meta.Kind, o.meta.Name, err)
	}
	o.selector = s
	return nil
}

// replicaSets finds the ReplicaSets o controls (its pods' controllers) and
// takes the revision of the newest: the one whose revision annotation is
// highest.
func (c *Cluster) replicaSets(ctx context.Context, o *object, sel *metav1.LabelSelector, revisionAnnotation string) error {
	if err := o.setSelector(sel); err != nil {
		return err
	}
	items, err := c.listReplicaSets(ctx, o.meta.Namespace, o.selector)
	if err != nil {
		return fmt.Errorf("listing the ReplicaSets of %s %s: %w", o.meta.Kind, o.meta.Name, err)
	}
	o.owners = map[types.UID]bool{}
	newest := int64(-1)
	for i := range items {
		rs := &items[i]
		if up := metav1.GetControllerOfNoCopy(rs); up == nil || up.UID != o.meta.UID {
			continue
		}
		o.owners[rs.UID] = true
		if n, err := strconv.ParseInt(rs.Annotations[revisionAnnotation], 10, 64); err == nil && n > newest {
			newest, o.revision = n, rs.Labels[workload.PodTemplateHashLabel]
		}
	}
	return nil
}

// rollout reads an Argo Rollout, which has no Go type here.
func (c *Cluster) rollout(ctx context.Context, key client.ObjectKey) (*object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(workload.RolloutGVK)
	if err := c.Reader.Get(ctx, key, u); err != nil {
		return nil, err
	}
	var spec struct {
		Replicas *int32                 `json:"replicas"`
		Selector *metav1.LabelSelector  `json:"selector"`
		Template corev1.PodTemplateSpec `json:"template"`
	}
	if raw, ok := u.Object["spec"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
			return nil, fmt.Errorf("the spec of Rollout %s: %w", key.Name, err)
		}
	}
	m := &metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), Labels: u.GetLabels(), Annotations: u.GetAnnotations(), CreationTimestamp: u.GetCreationTimestamp()}
	o := &object{meta: metaOf(m, workload.RolloutGVK), replicas: int64(ptr.Deref(spec.Replicas, 1)), template: spec.Template}
	if err := c.replicaSets(ctx, o, spec.Selector, "rollout.argoproj.io/revision"); err != nil {
		return nil, err
	}
	if hash, _, _ := unstructured.NestedString(u.Object, "status", "currentPodHash"); hash != "" {
		o.revision = hash
	}
	return o, nil
}

// job reads a Job, and the CronJob that controls it.
func (c *Cluster) job(ctx context.Context, key client.ObjectKey) (*object, error) {
	j := &batchv1.Job{}
	if err := c.Reader.Get(ctx, key, j); err != nil {
		return nil, err
	}
	o := &object{meta: metaOf(&j.ObjectMeta, workload.JobGVK), template: j.Spec.Template,
		owners: map[types.UID]bool{j.UID: true}, batch: true}
	if up := metav1.GetControllerOfNoCopy(j); workload.Is(up, workload.CronJobGVK) {
		cj := &batchv1.CronJob{}
		if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: up.Name}, cj); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		} else if err == nil && cj.UID == up.UID {
			o.parent = metaOf(&cj.ObjectMeta, workload.CronJobGVK)
		}
	}
	return o, o.setSelector(j.Spec.Selector)
}

// workflow reads an Argo Workflow, which has no Go type here. Its pods
// carry its spec.podMetadata (Argo copies it) and the label
// workflows.argoproj.io/workflow: its name.
func (c *Cluster) workflow(ctx context.Context, key client.ObjectKey) (*object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(workload.WorkflowGVK)
	if err := c.Reader.Get(ctx, key, u); err != nil {
		return nil, err
	}
	m := &metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), Labels: u.GetLabels(), Annotations: u.GetAnnotations(), CreationTimestamp: u.GetCreationTimestamp()}
	o := &object{meta: metaOf(m, workload.WorkflowGVK), owners: map[types.UID]bool{u.GetUID(): true}, batch: true,
		templatePath: "spec.podMetadata.annotations"}
	o.template.Annotations, _, _ = unstructured.NestedStringMap(u.Object, "spec", "podMetadata", "annotations")
	o.selector = labels.SelectorFromSet(labels.Set{"workflows.argoproj.io/workflow": u.GetName()})
	// What Argo records above the Workflow. Either may be gone or not
	// readable with the user's credentials: explain goes on without it.
	if name, _, _ := unstructured.NestedString(u.Object, "spec", "workflowTemplateRef", "name"); name != "" {
		kind := "WorkflowTemplate"
		if cluster, _, _ := unstructured.NestedBool(u.Object, "spec", "workflowTemplateRef", "clusterScope"); cluster {
			kind = "ClusterWorkflowTemplate"
		}
		if t := c.argoObject(ctx, kind, key.Namespace, name); t != nil {
			o.ref = kind + " " + name
			o.refAnnotations, _, _ = unstructured.NestedStringMap(t.Object, "spec", "podMetadata", "annotations")
		}
	}
	if name := u.GetLabels()[CronWorkflowLabel]; name != "" {
		if cw := c.argoObject(ctx, "CronWorkflow", key.Namespace, name); cw != nil {
			o.cron = "CronWorkflow " + name
			o.cronAnnotations = cw.GetAnnotations()
			o.cronWorkflowMeta, _, _ = unstructured.NestedStringMap(cw.Object, "spec", "workflowMetadata", "annotations")
		}
	}
	return o, nil
}

// CronWorkflowLabel is the label Argo sets on a Workflow a CronWorkflow
// created: the CronWorkflow's name.
const CronWorkflowLabel = "workflows.argoproj.io/cron-workflow"

// argoObject reads an argoproj.io/v1alpha1 object of kind; nil when it
// cannot be read (gone, forbidden, or the kind not served).
func (c *Cluster) argoObject(ctx context.Context, kind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(workload.WorkflowGVK.GroupVersion().WithKind(kind))
	key := client.ObjectKey{Namespace: namespace, Name: name}
	if kind == "ClusterWorkflowTemplate" {
		key.Namespace = ""
	}
	if err := c.Reader.Get(ctx, key, u); err != nil {
		return nil
	}
	return u
}

// pods lists o's live pods: those its selector matches whose controller is
// o or one of its ReplicaSets, not terminating or finished.
func (c *Cluster) pods(ctx context.Context, o *object) ([]*corev1.Pod, error) {
	items, err := c.listPods(ctx, o.meta.Namespace, o.selector)
	if err != nil {
		return nil, fmt.Errorf("listing the pods of %s %s: %w", o.meta.Kind, o.meta.Name, err)
	}
	var pods []*corev1.Pod
	for i := range items {
		p := &items[i]
		if up := metav1.GetControllerOfNoCopy(p); up == nil || !o.owners[up.UID] || podutil.IsTerminating(p) || podutil.IsTerminal(p) {
			continue
		}
		pods = append(pods, p)
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return pods, nil
}

// listing holds, while Status reports on the workloads of a namespace, the
// namespace's pods and ReplicaSets listed once: each workload's are picked
// by its selector from them, instead of two List requests per workload.
type listing struct {
	pods        map[string][]corev1.Pod
	replicaSets map[string][]appsv1.ReplicaSet
}

func newListing() *listing {
	return &listing{pods: map[string][]corev1.Pod{}, replicaSets: map[string][]appsv1.ReplicaSet{}}
}

// listPods lists the pods of namespace sel matches: from the listing when
// there is one (listing the namespace's pods the first time), else with a
// List of those alone.
func (c *Cluster) listPods(ctx context.Context, namespace string, sel labels.Selector) ([]corev1.Pod, error) {
	if c.listed == nil {
		var list corev1.PodList
		err := c.Reader.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel})
		return list.Items, err
	}
	all, ok := c.listed.pods[namespace]
	if !ok {
		var list corev1.PodList
		if err := c.Reader.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return nil, err
		}
		all = list.Items
		c.listed.pods[namespace] = all
	}
	return matching(all, sel, func(p *corev1.Pod) map[string]string { return p.Labels }), nil
}

// listReplicaSets is listPods for ReplicaSets.
func (c *Cluster) listReplicaSets(ctx context.Context, namespace string, sel labels.Selector) ([]appsv1.ReplicaSet, error) {
	if c.listed == nil {
		var list appsv1.ReplicaSetList
		err := c.Reader.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel})
		return list.Items, err
	}
	all, ok := c.listed.replicaSets[namespace]
	if !ok {
		var list appsv1.ReplicaSetList
		if err := c.Reader.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return nil, err
		}
		all = list.Items
		c.listed.replicaSets[namespace] = all
	}
	return matching(all, sel, func(rs *appsv1.ReplicaSet) map[string]string { return rs.Labels }), nil
}

// matching are the items whose labels sel matches.
func matching[T any](items []T, sel labels.Selector, labelsOf func(*T) map[string]string) []T {
	var out []T
	for i := range items {
		if sel.Matches(labels.Set(labelsOf(&items[i]))) {
			out = append(out, items[i])
		}
	}
	return out
}

// revisionOf is the revision a pod is counted in.
func revisionOf(p *corev1.Pod) string {
	if r := p.Labels[workload.PodTemplateHashLabel]; r != "" {
		return r
	}
	return p.Labels[appsv1.ControllerRevisionHashLabelKey]
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
