// Package memcache is an in-memory client.Reader that behaves like
// controller-runtime's informer cache on the paths apportion uses (Get of typed
// objects and of PartialObjectMetadata, List with a namespace, one field index,
// a limit and UnsafeDisableDeepCopy), without an API server. Benchmarks use it to
// measure the admission and placement paths against 10,000 cached pods: the
// fake client serialises every object through JSON and would measure itself.
// apportion plan resolves the workloads of manifests over it, as the webhook
// does over its caches.
package memcache

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// IndexFunc extracts index values, as in client.FieldIndexer.
type IndexFunc func(client.Object) []string

// Reader stores objects by kind, namespace and name.
type Reader struct {
	scheme  *runtime.Scheme
	mu      sync.RWMutex
	objects map[schema.GroupVersionKind]map[string]client.Object
	indexes map[schema.GroupVersionKind]map[string]IndexFunc
	byIndex map[string]map[string][]client.Object // field/value -> objects
}

var _ client.Reader = &Reader{}

// New returns an empty reader for the kinds of scheme.
func New(scheme *runtime.Scheme) *Reader {
	return &Reader{scheme: scheme,
		objects: map[schema.GroupVersionKind]map[string]client.Object{},
		indexes: map[schema.GroupVersionKind]map[string]IndexFunc{},
		byIndex: map[string]map[string][]client.Object{},
	}
}

// Index registers a field index for a kind; call before Add.
func (r *Reader) Index(obj client.Object, field string, fn IndexFunc) error {
	gvk, err := apiutil.GVKForObject(obj, r.scheme)
	if err != nil {
		return err
	}
	if r.indexes[gvk] == nil {
		r.indexes[gvk] = map[string]IndexFunc{}
	}
	r.indexes[gvk][field] = fn
	return nil
}

// Add stores objects (not copies: do not modify them afterwards).
func (r *Reader) Add(objs ...client.Object) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, r.scheme)
		if err != nil {
			return err
		}
		if r.objects[gvk] == nil {
			r.objects[gvk] = map[string]client.Object{}
		}
		r.objects[gvk][key(o.GetNamespace(), o.GetName())] = o
		for field, fn := range r.indexes[gvk] {
			for _, v := range fn(o) {
				k := gvk.String() + "/" + field
				if r.byIndex[k] == nil {
					r.byIndex[k] = map[string][]client.Object{}
				}
				r.byIndex[k][key(o.GetNamespace(), v)] = append(r.byIndex[k][key(o.GetNamespace(), v)], o)
			}
		}
	}
	return nil
}

func key(namespace, name string) string { return namespace + "/" + name }

// Get copies the stored object into obj, or its metadata into a
// PartialObjectMetadata.
func (r *Reader) Get(_ context.Context, k client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	gvk, err := r.gvk(obj)
	if err != nil {
		return err
	}
	r.mu.RLock()
	stored, ok := r.objects[gvk][key(k.Namespace, k.Name)]
	r.mu.RUnlock()
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, k.Name)
	}
	if pom, isMeta := obj.(*metav1.PartialObjectMetadata); isMeta {
		stored.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta).DeepCopyInto(&pom.ObjectMeta)
		pom.SetGroupVersionKind(gvk)
		return nil
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(stored.DeepCopyObject()).Elem())
	return nil
}

// List fills list with the stored objects of its kind, filtered by namespace
// and at most one field index, at most Limit of them. A
// PartialObjectMetadataList gets their metadata.
func (r *Reader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	listGVK, err := apiutil.GVKForObject(list, r.scheme)
	if err != nil {
		return err
	}
	gvk := listGVK.GroupVersion().WithKind(listGVK.Kind[:len(listGVK.Kind)-len("List")])
	r.mu.RLock()
	defer r.mu.RUnlock()
	var objs []client.Object
	if lo.FieldSelector != nil && !lo.FieldSelector.Empty() {
		reqs := lo.FieldSelector.Requirements()
		if len(reqs) != 1 || reqs[0].Operator != "=" && reqs[0].Operator != "==" {
			return fmt.Errorf("memcache: one field equality supported, got %s", lo.FieldSelector)
		}
		objs = r.byIndex[gvk.String()+"/"+reqs[0].Field][key(lo.Namespace, reqs[0].Value)]
	} else {
		for _, o := range r.objects[gvk] {
			if lo.Namespace == "" || o.GetNamespace() == lo.Namespace {
				objs = append(objs, o)
			}
		}
	}
	// As the informer cache: at most Limit objects.
	if lo.Limit > 0 && int64(len(objs)) > lo.Limit {
		objs = objs[:lo.Limit]
	}
	if meta, ok := list.(*metav1.PartialObjectMetadataList); ok {
		meta.Items = make([]metav1.PartialObjectMetadata, len(objs))
		for i, o := range objs {
			o.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta).DeepCopyInto(&meta.Items[i].ObjectMeta)
			meta.Items[i].SetGroupVersionKind(gvk)
		}
		return nil
	}
	items := reflect.ValueOf(list).Elem().FieldByName("Items")
	out := reflect.MakeSlice(items.Type(), len(objs), len(objs))
	for i, o := range objs {
		if lo.UnsafeDisableDeepCopy != nil && *lo.UnsafeDisableDeepCopy {
			out.Index(i).Set(reflect.ValueOf(o).Elem())
		} else {
			out.Index(i).Set(reflect.ValueOf(o.DeepCopyObject()).Elem())
		}
	}
	items.Set(out)
	return nil
}

func (r *Reader) gvk(obj client.Object) (schema.GroupVersionKind, error) {
	if pom, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return pom.GroupVersionKind(), nil
	}
	return apiutil.GVKForObject(obj, r.scheme)
}
