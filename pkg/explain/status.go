package explain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Status reports on every workload of namespace ("" for all) that carries a
// strategy or that a PlacementPolicy targets, sorted by namespace, kind and
// name. Workloads without a strategy, and ReplicaSets a Deployment or
// Rollout controls, are left out.
func (c *Cluster) Status(ctx context.Context, namespace string) ([]*WorkloadReport, error) {
	// A copy that lists each namespace's pods and ReplicaSets once.
	lc := *c
	lc.listed = newListing()
	refs, err := lc.candidates(ctx, namespace)
	if err != nil {
		return nil, err
	}
	var out []*WorkloadReport
	for _, ref := range refs {
		w, err := lc.Workload(ctx, ref)
		if client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", ref.Kind, ref.Namespace, ref.Name, err)
		}
		if w == nil || (w.Strategy == "" && !strings.HasPrefix(w.Source, "PlacementPolicy") && !strings.HasPrefix(w.Source, "ClusterPlacementPolicy")) {
			continue
		}
		out = append(out, w)
	}
	return out, nil
}

// candidates lists the workloads that may be placed: those with a strategy
// annotation (on the object or its pod template), and every workload of a
// namespace that holds PlacementPolicies.
func (c *Cluster) candidates(ctx context.Context, namespace string) ([]Ref, error) {
	withPolicies, err := c.namespacesWithPolicies(ctx, namespace)
	if err != nil {
		return nil, err
	}
	keep := func(m *metav1.ObjectMeta, template map[string]string) bool {
		_, _, found := strategy.Find(m.Annotations, template)
		return found || withPolicies[m.Namespace]
	}
	var refs []Ref
	add := func(kind string, m *metav1.ObjectMeta, template map[string]string) {
		if keep(m, template) {
			refs = append(refs, Ref{Kind: kind, Namespace: m.Namespace, Name: m.Name})
		}
	}
	var deployments appsv1.DeploymentList
	if err := c.Reader.List(ctx, &deployments, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing Deployments: %w", err)
	}
	for i := range deployments.Items {
		d := &deployments.Items[i]
		add("Deployment", &d.ObjectMeta, d.Spec.Template.Annotations)
	}
	var statefulSets appsv1.StatefulSetList
	if err := c.Reader.List(ctx, &statefulSets, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing StatefulSets: %w", err)
	}
	for i := range statefulSets.Items {
		s := &statefulSets.Items[i]
		add("StatefulSet", &s.ObjectMeta, s.Spec.Template.Annotations)
	}
	var replicaSets appsv1.ReplicaSetList
	if err := c.Reader.List(ctx, &replicaSets, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing ReplicaSets: %w", err)
	}
	if c.listed != nil {
		// The Deployments' and Rollouts' ReplicaSets are picked from
		// this listing: no List of them per workload.
		c.listed.replicaSets = map[string][]appsv1.ReplicaSet{}
		for _, rs := range replicaSets.Items {
			c.listed.replicaSets[rs.Namespace] = append(c.listed.replicaSets[rs.Namespace], rs)
		}
		if namespace != "" && c.listed.replicaSets[namespace] == nil {
			c.listed.replicaSets[namespace] = []appsv1.ReplicaSet{}
		}
	}
	for i := range replicaSets.Items {
		rs := &replicaSets.Items[i]
		if metav1.GetControllerOfNoCopy(rs) == nil {
			add("ReplicaSet", &rs.ObjectMeta, rs.Spec.Template.Annotations)
		}
	}
	if c.Rollouts {
		var rollouts metav1.PartialObjectMetadataList
		rollouts.SetGroupVersionKind(workload.RolloutGVK.GroupVersion().WithKind("RolloutList"))
		if err := c.Reader.List(ctx, &rollouts, client.InNamespace(namespace)); err != nil {
			return nil, fmt.Errorf("listing Rollouts: %w", err)
		}
		for i := range rollouts.Items {
			// The template's annotations are not in the metadata:
			// every Rollout is a candidate, Workload tells.
			refs = append(refs, Ref{Kind: "Rollout", Namespace: rollouts.Items[i].Namespace, Name: rollouts.Items[i].Name})
		}
	}
	batch, err := c.batchCandidates(ctx, namespace)
	if err != nil {
		return nil, err
	}
	refs = append(refs, batch...)
	slices.SortFunc(refs, func(a, b Ref) int {
		return strings.Compare(a.Namespace+"/"+a.Kind+"/"+a.Name, b.Namespace+"/"+b.Kind+"/"+b.Name)
	})
	return refs, nil
}

// namespacesWithPolicies are the namespaces (only namespace, when set) that
// hold PlacementPolicies or that a ClusterPlacementPolicy covers.
func (c *Cluster) namespacesWithPolicies(ctx context.Context, namespace string) (map[string]bool, error) {
	out := map[string]bool{}
	if c.Policies {
		var list metav1.PartialObjectMetadataList
		list.SetGroupVersionKind(v1alpha1.PlacementPolicyGVK.GroupVersion().WithKind("PlacementPolicyList"))
		if err := c.Reader.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return nil, fmt.Errorf("listing PlacementPolicies: %w", err)
		}
		for _, p := range list.Items {
			out[p.Namespace] = true
		}
	}
	return out, c.coveredNamespaces(ctx, namespace, out)
}

// coveredNamespaces adds to into the namespaces a ClusterPlacementPolicy
// covers (only namespace, when set). Without the right to read cluster
// policies or namespaces, the workloads they place are left out of the
// status, as those of namespaces the user cannot read are.
func (c *Cluster) coveredNamespaces(ctx context.Context, namespace string, into map[string]bool) error {
	if !c.ClusterPolicies {
		return nil
	}
	src := policy.NewSource(c.Reader).WithClusterPolicies(nil)
	all, err := src.ClusterPolicies(ctx)
	if apierrors.IsForbidden(err) || len(all) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if namespace != "" {
		ns, err := src.Namespace(ctx, namespace)
		if apierrors.IsForbidden(err) || errors.Is(err, workload.ErrNotCached) {
			return nil
		}
		if err != nil {
			return err
		}
		list.Items = []metav1.PartialObjectMetadata{*ns}
	} else if err := c.Reader.List(ctx, &list); err != nil {
		if apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("listing namespaces: %w", err)
	}
	for i := range list.Items {
		for _, p := range all {
			if src.SelectsNamespace(p, &list.Items[i]) {
				into[list.Items[i].Name] = true
			}
		}
	}
	return nil
}

// jobFailed reports whether the Job has failed for good.
func jobFailed(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// batchCandidates are the Jobs and Workflows of namespace that run: a
// finished one has no live pods to split. Their strategy may come from a
// CronJob or from their pods' annotations: every running one is a
// candidate, Workload tells.
func (c *Cluster) batchCandidates(ctx context.Context, namespace string) ([]Ref, error) {
	var refs []Ref
	var jobs batchv1.JobList
	if err := c.Reader.List(ctx, &jobs, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing Jobs: %w", err)
	}
	for i := range jobs.Items {
		if j := &jobs.Items[i]; j.Status.CompletionTime == nil && !jobFailed(j) {
			refs = append(refs, Ref{Kind: "Job", Namespace: j.Namespace, Name: j.Name})
		}
	}
	if !c.Workflows {
		return refs, nil
	}
	var workflows metav1.PartialObjectMetadataList
	workflows.SetGroupVersionKind(workload.WorkflowGVK.GroupVersion().WithKind("WorkflowList"))
	if err := c.Reader.List(ctx, &workflows, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing Workflows: %w", err)
	}
	for i := range workflows.Items {
		// Argo labels a Workflow that is done.
		if w := &workflows.Items[i]; w.Labels["workflows.argoproj.io/completed"] != "true" {
			refs = append(refs, Ref{Kind: "Workflow", Namespace: w.Namespace, Name: w.Name})
		}
	}
	return refs, nil
}
