package explain

import (
	"context"
	"fmt"
	"slices"
	"strconv"

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

	"github.com/apportion-dev/apportion/pkg/workload"
)

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
