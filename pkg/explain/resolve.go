package explain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// chain is o as resolution reads it.
func (o *object) chain() workload.Chain {
	return workload.Chain{Top: o.meta, Parent: o.parent, Template: o.template.Annotations, TemplateAt: o.templatePath,
		Ref: o.ref, RefTemplate: o.refAnnotations}
}

// strategyOf resolves o as the webhook and `apportion plan` do
// (workload.ResolveChain), over the policies read from the API server with
// the caller's credentials.
func (c *Cluster) strategyOf(ctx context.Context, o *object, r *WorkloadReport) error {
	src, note, err := c.policySource(ctx, o.meta.Namespace)
	if err != nil {
		return err
	}
	chain := o.chain()
	info, err := workload.ResolveChain(ctx, o.meta.Namespace, chain, workload.WithPolicies(src.OrNil()), workload.WithValidation(), workload.WithExplanations())
	if err != nil {
		return err
	}
	r.Answer = info.Answer(&chain)
	if note != "" {
		r.Why = workload.JoinWhy(r.Why, note)
	}
	o.cronWhy(r, info.Strategy, info.Source, info.Found)
	return nil
}

// staticSource is a namespace's policies as read once, and what could not
// be read.
type staticSource struct {
	src  *policy.Source
	note string
}

// policySource reads the policies that may place a workload of namespace
// (its PlacementPolicies, the ClusterPlacementPolicies and the namespace's
// labels), once per namespace. What the caller may not read is left out,
// and note says so.
func (c *Cluster) policySource(ctx context.Context, namespace string) (*policy.Source, string, error) {
	if s, ok := c.sources[namespace]; ok {
		return s.src, s.note, nil
	}
	var policies []*v1alpha1.PlacementPolicy
	if c.Policies {
		var list v1alpha1.PlacementPolicyList
		if err := c.Reader.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return nil, "", fmt.Errorf("listing PlacementPolicies: %w", err)
		}
		for i := range list.Items {
			policies = append(policies, &list.Items[i])
		}
	}
	var clusters []*v1alpha1.ClusterPlacementPolicy
	namespaces := map[string]map[string]string{}
	note := ""
	if c.ClusterPolicies {
		var err error
		if clusters, err = c.clusterPolicies(ctx, namespace, namespaces); err != nil {
			if !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) {
				return nil, "", err
			}
			clusters, note = nil, "ClusterPlacementPolicies not checked: "+err.Error()
		}
	}
	src, err := policy.Static(policies, clusters, namespaces, nil)
	if err != nil {
		return nil, "", err
	}
	if c.sources == nil {
		c.sources = map[string]staticSource{}
	}
	c.sources[namespace] = staticSource{src, note}
	return src, note, nil
}

// clusterPolicies lists the ClusterPlacementPolicies and, when there are
// any, reads the namespace's labels into namespaces.
func (c *Cluster) clusterPolicies(ctx context.Context, namespace string, namespaces map[string]map[string]string) ([]*v1alpha1.ClusterPlacementPolicy, error) {
	var list v1alpha1.ClusterPlacementPolicyList
	if err := c.Reader.List(ctx, &list); err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.Reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	namespaces[namespace] = ns.Labels
	out := make([]*v1alpha1.ClusterPlacementPolicy, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// cronWhy says, of a CronWorkflow's Workflow, that Argo copied the
// Workflow's strategy from the CronWorkflow's spec.workflowMetadata; and,
// when nothing places the Workflow, that the CronWorkflow's own annotations
// are not copied.
func (o *object) cronWhy(r *WorkloadReport, raw string, src strategy.Source, found bool) {
	if o.cron == "" {
		return
	}
	if found && !src.Template && src.Owner == "" && src.Policy == "" {
		if v, ok := o.cronWorkflowMeta[src.Annotation]; ok && v == raw {
			r.Why = workload.JoinWhy(r.Why, "Argo copies it onto each Workflow from "+o.cron+" spec.workflowMetadata.annotations")
		}
		return
	}
	if _, _, own := strategy.Find(o.cronAnnotations, nil); own && !found {
		r.Why = workload.JoinWhy(r.Why, o.cron+" has the strategy in its own metadata.annotations, which Argo does not copy onto its Workflows: write it under spec.workflowMetadata.annotations")
	}
}
