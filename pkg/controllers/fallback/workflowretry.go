package fallback

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Argo's pod annotation naming the pod's node in the Workflow's
// status.nodes; without it (older Argo) the pod's name is the node's ID.
const argoNodeIDAnnotation = "workflows.argoproj.io/node-id"

// workflowRetry: the pod may go when Argo retries its step with a new pod:
// its node in the Workflow's status.nodes is an attempt of a Retry node
// whose template's retryStrategy (else the Workflow's spec.retryStrategy)
// retries an errored node (a deleted pod's: retryPolicy Always or OnError),
// has no expression (apportion does not evaluate it), and a limit above the
// attempts made so far (Argo retries while they are at most the limit).
func (c *Controller) workflowRetry(ctx context.Context, pod *corev1.Pod, owner *metav1.OwnerReference) (*retrySpend, string, error) {
	wf := &unstructured.Unstructured{}
	wf.SetGroupVersionKind(workflowGVK)
	err := c.opts.APIReader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: owner.Name}, wf)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && wf.GetUID() != owner.UID):
		return nil, "the Workflow is gone", nil
	case err != nil:
		return nil, "", fmt.Errorf("reading Workflow %s/%s: %w", pod.Namespace, owner.Name, err)
	}
	const noRetry = "Argo does not recreate a Workflow's deleted pod, and its step has no retryStrategy that would retry it " +
		"(retryPolicy Always or OnError, attempts left)"
	nodeID := pod.Annotations[argoNodeIDAnnotation]
	if nodeID == "" {
		nodeID = pod.Name
	}
	nodes, _, _ := unstructured.NestedMap(wf.Object, "status", "nodes")
	if _, ok := nodes[nodeID]; !ok {
		return nil, noRetry + ": its node is not in the Workflow's status", nil
	}
	parent := retryNodeOf(nodes, nodeID)
	if parent == nil {
		return nil, noRetry, nil
	}
	rs := retryStrategyOf(wf.Object, parent)
	if rs == nil {
		return nil, noRetry + ": apportion cannot find its template's retryStrategy", nil
	}
	policy, _, _ := unstructured.NestedString(rs, "retryPolicy")
	if expr, _, _ := unstructured.NestedString(rs, "expression"); expr != "" {
		return nil, noRetry + ": its retryStrategy has an expression, which apportion does not evaluate", nil
	}
	if policy != "Always" && policy != "OnError" {
		if policy == "" {
			policy = "OnFailure (the default)"
		}
		return nil, fmt.Sprintf("%s: its retryStrategy's retryPolicy is %s, which does not retry a deleted pod", noRetry, policy), nil
	}
	children, _, _ := unstructured.NestedStringSlice(parent, "children")
	attempts := max(len(children), 1)
	limit, limited, ok := retryLimit(rs)
	switch {
	case !ok:
		return nil, noRetry + ": its retryStrategy's limit is not a number", nil
	case limited && attempts > limit:
		return nil, fmt.Sprintf("%s: its retryStrategy's limit %d is used up (%d attempts)", noRetry, limit, attempts), nil
	case !limited:
		return &retrySpend{result: resultRetryWorkflow, cost: fmt.Sprintf("used retry %d of its step's retryStrategy (no limit)", attempts), index: -1}, "", nil
	}
	return &retrySpend{result: resultRetryWorkflow, cost: fmt.Sprintf("used retry %d of its step's retryStrategy limit %d", attempts, limit), index: -1}, "", nil
}

// retryNodeOf is the Retry node of a Workflow's status.nodes whose
// attempts (children) include id, or nil.
func retryNodeOf(nodes map[string]any, id string) map[string]any {
	for _, n := range nodes {
		node, ok := n.(map[string]any)
		if !ok {
			continue
		}
		if t, _, _ := unstructured.NestedString(node, "type"); t != "Retry" {
			continue
		}
		if children, _, _ := unstructured.NestedStringSlice(node, "children"); slices.Contains(children, id) {
			return node
		}
	}
	return nil
}

// retryStrategyOf is the retryStrategy Argo applies to a Retry node: its
// template's (spec.templates, with spec.templateDefaults under it), else
// the Workflow's spec.retryStrategy. The spec is the one Argo runs:
// status.storedWorkflowTemplateSpec when the Workflow has one (a Workflow
// of a WorkflowTemplate), else spec. nil: none found, or a template of
// another WorkflowTemplate (templateRef), which apportion does not read.
func retryStrategyOf(wf map[string]any, node map[string]any) map[string]any {
	if _, ref := node["templateRef"]; ref {
		return nil
	}
	spec, found, _ := unstructured.NestedMap(wf, "status", "storedWorkflowTemplateSpec")
	if !found {
		spec, _, _ = unstructured.NestedMap(wf, "spec")
	}
	name, _, _ := unstructured.NestedString(node, "templateName")
	templates, _, _ := unstructured.NestedSlice(spec, "templates")
	for _, t := range templates {
		tmpl, ok := t.(map[string]any)
		if !ok || name == "" || tmpl["name"] != name {
			continue
		}
		if rs, found, _ := unstructured.NestedMap(tmpl, "retryStrategy"); found {
			return rs
		}
	}
	if rs, found, _ := unstructured.NestedMap(spec, "templateDefaults", "retryStrategy"); found {
		return rs
	}
	rs, _, _ := unstructured.NestedMap(spec, "retryStrategy")
	return rs
}

// retryLimit reads a retryStrategy's limit (an integer or a string of
// one): limited false without one (Argo retries without end); ok false
// when it is not a number (an expression apportion does not evaluate).
func retryLimit(rs map[string]any) (limit int, limited, ok bool) {
	switch v := rs["limit"].(type) {
	case nil:
		return 0, false, true
	case int64:
		return int(v), true, true
	case float64:
		return int(v), true, true
	case string:
		n, err := strconv.Atoi(v)
		return n, true, err == nil
	}
	return 0, false, false
}
