package policy

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
)

// Static is a Source over a fixed set of objects, held as the informer
// caches would hold them: `apportion plan` builds it from manifests and
// `apportion explain` from what it lists on the API server, and both then
// resolve through the same Source the webhook uses. namespaces maps each
// namespace to its labels (kubernetes.io/metadata.name is added, as the API
// server sets it); excluded are the namespaces no cluster policy covers,
// besides the system ones.
func Static(policies []*v1alpha1.PlacementPolicy, clusters []*v1alpha1.ClusterPlacementPolicy, namespaces map[string]map[string]string, excluded []string) (*Source, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	r := memcache.New(scheme)
	if err := r.Index(&v1alpha1.PlacementPolicy{}, IndexTarget, TargetIndex); err != nil {
		return nil, err
	}
	objs := make([]client.Object, 0, len(policies)+len(clusters)+len(namespaces))
	for _, p := range policies {
		objs = append(objs, p)
	}
	for _, p := range clusters {
		objs = append(objs, p)
	}
	for name, l := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelMetadataName: name}}}
		for k, v := range l {
			ns.Labels[k] = v
		}
		objs = append(objs, ns)
	}
	if err := r.Add(objs...); err != nil {
		return nil, err
	}
	return NewSource(r).WithClusterPolicies(excluded), nil
}
