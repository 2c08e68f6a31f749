// Package explain reads, from a live cluster, what `apportion explain` and
// `apportion status` report: for a workload, its strategy and where it comes
// from, its split now by the labels of its Running pods' nodes next to the
// quota at its replica count (pkg/split), the groups left out and why, its
// decided, shadow, stray, fallback and waiting pods, and the groups the next
// pods would get; for a pod, its decision record next to all that.
//
// Everything is read with the caller's credentials through a client.Reader
// (get and list only): pods, nodes' metadata, the workload objects, and,
// when they are served, NodePools and PlacementPolicies. Nothing is written.
// A capacity outage apportion's leader holds in memory is not visible here;
// the decisions made during one carry it (their record's out list and the
// apportion.dev/fallback annotation).
//
// What is where: explain.go, the Cluster and the workload reference;
// objects.go, reading a workload and its pods; resolve.go, its strategy,
// source and mode, through the resolver the webhook and plan use;
// workload.go, a workload's report; pod.go, a pod's report; status.go, the
// list of every placed workload.
package explain

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// NextPods is how many of the next pods' groups a workload report lists.
const NextPods = 10

// NextBeyondCaps stands in a report's Next for a pod beyond caps: every
// group with a weight is at its cap, and the pod is placed without a group.
const NextBeyondCaps = "(beyond caps)"

// Cluster is what a report is read from.
type Cluster struct {
	Reader client.Reader
	// Capacity says which groups can be served now: from the NodePools
	// with Karpenter, from the nodes' labels without.
	Capacity capacity.Capacity
	// NodePools and Policies say whether karpenter.sh/v1 NodePools and
	// PlacementPolicies are served; Rollouts and Workflows whether Argo
	// Rollouts and Workflows are.
	NodePools, Policies, Rollouts, Workflows bool
	// ClusterPolicies says whether ClusterPlacementPolicies are served.
	ClusterPolicies bool

	listed *listing // while Status runs: each namespace's pods and ReplicaSets, listed once
	// sources are each namespace's policies, read once.
	sources map[string]staticSource
}

// NewCluster reads which APIs c's cluster serves and builds the Cluster.
func NewCluster(c client.Client) (*Cluster, error) {
	mapper := c.RESTMapper()
	served := func(gvk schema.GroupVersionKind) (bool, error) {
		_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		switch {
		case err == nil:
			return true, nil
		case meta.IsNoMatchError(err):
			return false, nil
		default:
			return false, fmt.Errorf("asking the API server for %s: %w", gvk.Kind, err)
		}
	}
	cl := &Cluster{Reader: c}
	var err error
	if cl.NodePools, err = served(capacity.NodePoolGVK); err != nil {
		return nil, err
	}
	if cl.Policies, err = served(v1alpha1.PlacementPolicyGVK); err != nil {
		return nil, err
	}
	if cl.ClusterPolicies, err = served(v1alpha1.ClusterPlacementPolicyGVK); err != nil {
		return nil, err
	}
	if cl.Rollouts, err = served(workload.RolloutGVK); err != nil {
		return nil, err
	}
	if cl.Workflows, err = served(workload.WorkflowGVK); err != nil {
		return nil, err
	}
	if cl.NodePools {
		cl.Capacity = &capacity.NodePoolCapacity{Reader: c}
	} else {
		cl.Capacity = &capacity.NodeLabelCapacity{Reader: c}
	}
	return cl, nil
}

// Ref names what to explain: a pod or a workload.
type Ref struct {
	Kind      string // Pod, Deployment, StatefulSet, ReplicaSet, Rollout, Job or Workflow
	Namespace string
	Name      string
}

func (r Ref) String() string { return strings.ToLower(r.Kind) + "/" + r.Name }

// kinds are the names a kind may be written as, kubectl style.
var kinds = map[string]string{
	"pod": "Pod", "pods": "Pod", "po": "Pod",
	"deployment": "Deployment", "deployments": "Deployment", "deploy": "Deployment",
	"statefulset": "StatefulSet", "statefulsets": "StatefulSet", "sts": "StatefulSet",
	"replicaset": "ReplicaSet", "replicasets": "ReplicaSet", "rs": "ReplicaSet",
	"rollout": "Rollout", "rollouts": "Rollout", "ro": "Rollout",
	"job": "Job", "jobs": "Job",
	"workflow": "Workflow", "workflows": "Workflow", "wf": "Workflow",
}

// ErrUsage marks an argument that names nothing explain can read.
var ErrUsage = errors.New("invalid argument")

// ParseRef reads "TYPE/NAME" (or TYPE and NAME as two arguments).
func ParseRef(args []string, namespace string) (Ref, error) {
	var kind, name string
	switch len(args) {
	case 1:
		var ok bool
		if kind, name, ok = strings.Cut(args[0], "/"); !ok {
			return Ref{}, fmt.Errorf("%w: %q: write TYPE/NAME, e.g. deployment/web or pod/web-7d4b9-x2x8k", ErrUsage, args[0])
		}
	case 2:
		kind, name = args[0], args[1]
	default:
		return Ref{}, fmt.Errorf("%w: one TYPE/NAME is needed, got %d arguments", ErrUsage, len(args))
	}
	kind = strings.ToLower(kind)
	for _, group := range []string{".apps", ".batch", ".argoproj.io"} {
		kind = strings.TrimSuffix(kind, group)
	}
	k, ok := kinds[kind]
	if !ok {
		return Ref{}, fmt.Errorf("%w: unknown type %q: use pod, deployment, statefulset, replicaset, rollout, job or workflow", ErrUsage, kind)
	}
	if name == "" || strings.Contains(name, "/") {
		return Ref{}, fmt.Errorf("%w: %q is not a name", ErrUsage, name)
	}
	return Ref{Kind: k, Namespace: namespace, Name: name}, nil
}
