package podcache

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// IndexController indexes cached pods by the UID of their controller (a
// ReplicaSet, a StatefulSet, a Job, a Workflow): the controllers that read
// the pods of one workload read them through it, never every pod.
const IndexController = "pod.controller"

// ControllerIndex is the IndexController of a pod: its controller's UID.
// The owner of a cached pod (Pod) is read in place.
func ControllerIndex(o client.Object) []string {
	if owner := metav1.GetControllerOfNoCopy(o); owner != nil {
		return []string{string(owner.UID)}
	}
	return nil
}

// IndexByController adds IndexController to the pod cache. It is added
// once, before the cache starts, for every controller that reads it: a
// second index of the same name is an error.
func IndexByController(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &corev1.Pod{}, IndexController, ControllerIndex); err != nil {
		return fmt.Errorf("indexing pods by controller: %w", err)
	}
	return nil
}

// Indexer is the pod informer's indexer in informers: its store and its
// indexes, holding the stored *Pods themselves (read them through View,
// never change them). Nil when the informer exposes none (a cache
// restricted to some namespaces): read the pods through the client then.
func Indexer(ctx context.Context, informers cache.Informers) (toolscache.Indexer, error) {
	inf, err := informers.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("getting the pod informer: %w", err)
	}
	if i, ok := inf.(interface{ GetIndexer() toolscache.Indexer }); ok {
		return i.GetIndexer(), nil
	}
	return nil, nil
}
