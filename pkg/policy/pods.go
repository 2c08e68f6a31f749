package policy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Running reads o's Running pods: the labels of the node of each, but for
// those the placement controller released beyond caps (WithSigner), which
// beyondCaps counts: they are in no group, whatever their node. A batch
// workload's are among the live pods Observe counted; any other's are read
// through the pod index, per ReplicaSet of a Deployment or Rollout. A pod
// being deleted counts for nothing.
func (x *Observer) Running(ctx context.Context, o *Observed) (nodeLabels []map[string]string, beyondCaps int64, err error) {
	x.enter(o.Top.Namespace)
	add := func(pods []corev1.Pod) error {
		for i := range pods {
			pod := &pods[i]
			if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
				continue
			}
			if x.signer.BeyondCaps(pod) {
				beyondCaps++
				continue
			}
			l, err := x.nodeLabels(ctx, pod.Spec.NodeName)
			if err != nil {
				return err
			}
			nodeLabels = append(nodeLabels, l)
		}
		return nil
	}
	if o.batch {
		err := add(o.pods)
		return nodeLabels, beyondCaps, err
	}
	controllers := []types.UID{o.Top.UID}
	if k := o.Top.GroupVersionKind(); k == workload.DeploymentGVK || k == workload.RolloutGVK {
		if controllers, err = x.replicaSetsOf(ctx, o.Top.UID); err != nil {
			return nil, 0, err
		}
	}
	for _, uid := range controllers {
		pods, err := x.podsOf(ctx, o.Top, uid)
		if err != nil {
			return nil, 0, err
		}
		if err := add(pods); err != nil {
			return nil, 0, err
		}
	}
	return nodeLabels, beyondCaps, nil
}

// enter starts reading namespace: what was kept of another is dropped.
func (x *Observer) enter(namespace string) {
	if namespace != x.namespace {
		x.namespace, x.replicaSets, x.jobs = namespace, nil, nil
	}
}

// podsOf lists the pods the controller uid controls, of the workload top.
func (x *Observer) podsOf(ctx context.Context, top *metav1.PartialObjectMetadata, uid types.UID) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := x.reader.List(ctx, &pods, client.InNamespace(top.Namespace), client.MatchingFields{podcache.IndexController: string(uid)}); err != nil {
		return nil, fmt.Errorf("listing pods of %s %s/%s: %w", top.GroupVersionKind().Kind, top.Namespace, top.Name, err)
	}
	return pods.Items, nil
}

// livePods are the live pods of the Job or Workflow top: its replicas.
func (x *Observer) livePods(ctx context.Context, top *metav1.PartialObjectMetadata) ([]corev1.Pod, error) {
	pods, err := x.podsOf(ctx, top, top.UID)
	if err != nil {
		return nil, err
	}
	live := pods[:0]
	for i := range pods {
		if workload.Live(&pods[i]) {
			live = append(live, pods[i])
		}
	}
	return live, nil
}

// podAnnotations are the annotations a batch workload's pods carry: their
// template's, which the pods of one Job share. Should they differ (a
// suspended Job's template changed), every key any pod has is kept, the
// first pod's value first: a strategy or an opt-out on some of its pods is
// the workload's.
func podAnnotations(pods []corev1.Pod) map[string]string {
	var out map[string]string
	for i := range pods {
		for k, v := range pods[i].Annotations {
			if out == nil {
				out = map[string]string{}
			}
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
	return out
}

// replicaSetsOf are the ReplicaSets the Deployment or Rollout uid controls,
// from one list of the namespace's ReplicaSet metadata.
func (x *Observer) replicaSetsOf(ctx context.Context, uid types.UID) ([]types.UID, error) {
	if x.replicaSets == nil {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(workload.ReplicaSetGVK.GroupVersion().WithKind("ReplicaSetList"))
		if err := x.reader.List(ctx, list, client.InNamespace(x.namespace), client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing replicasets of %s: %w", x.namespace, err)
		}
		x.replicaSets = map[types.UID][]types.UID{}
		for i := range list.Items {
			if up := metav1.GetControllerOfNoCopy(&list.Items[i]); up != nil {
				x.replicaSets[up.UID] = append(x.replicaSets[up.UID], list.Items[i].UID)
			}
		}
	}
	return x.replicaSets[uid], nil
}

// jobsOf are the Jobs the CronJob uid controls, from one list of the
// namespace's Job metadata.
func (x *Observer) jobsOf(ctx context.Context, uid types.UID) ([]*metav1.PartialObjectMetadata, error) {
	if x.jobs == nil {
		jobs, err := workload.JobsByCronJob(ctx, x.reader, x.namespace)
		if err != nil {
			return nil, err
		}
		x.jobs = jobs
	}
	return x.jobs[uid], nil
}

// nodeLabels reads a node's labels from the metadata cache, once per
// Observer; a node gone has none.
func (x *Observer) nodeLabels(ctx context.Context, name string) (map[string]string, error) {
	if l, ok := x.nodes[name]; ok {
		return l, nil
	}
	node := metadataOf(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := x.reader.Get(ctx, client.ObjectKey{Name: name}, node); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting node %s: %w", name, err)
	}
	x.nodes[name] = node.Labels
	return node.Labels, nil
}
