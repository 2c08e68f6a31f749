package placement

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/workload"
)

// PodLister returns the pods counted together under one owner key. The pods
// may be shared with the cache: callers only read them.
type PodLister interface {
	OwnerPods(ctx context.Context, namespace, key string) ([]*corev1.Pod, error)
}

// ownerIndexName is the informer index OwnerPods reads.
const ownerIndexName = "apportion/owner"

// AddOwnerIndex adds the owner-key index to a pod informer.
func AddOwnerIndex(informer interface {
	AddIndexers(toolscache.Indexers) error
}) error {
	return informer.AddIndexers(toolscache.Indexers{ownerIndexName: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		if k := workload.OwnerKey(pod); k != "" {
			return []string{pod.Namespace + "/" + k}, nil
		}
		return nil, nil
	}})
}

// IndexerPods reads the pod informer's index directly: no copy of the pods,
// which matters when a revision holds thousands of them.
type IndexerPods struct {
	Indexer toolscache.Indexer
}

// OwnerPods implements PodLister.
func (p IndexerPods) OwnerPods(_ context.Context, namespace, key string) ([]*corev1.Pod, error) {
	objs, err := p.Indexer.ByIndex(ownerIndexName, namespace+"/"+key)
	if err != nil {
		return nil, fmt.Errorf("reading the pod index: %w", err)
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}

// ClientPods lists through a client with the IndexOwnerKey field index (for
// tests and for readers without an informer).
type ClientPods struct {
	Client client.Reader
}

// OwnerPods implements PodLister.
func (p ClientPods) OwnerPods(ctx context.Context, namespace, key string) ([]*corev1.Pod, error) {
	var list corev1.PodList
	if err := p.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{IndexOwnerKey: key}); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}
