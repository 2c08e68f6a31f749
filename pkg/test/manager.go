package test

import (
	"net/http"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// UnstartedManager is a manager for tests that register controllers,
// informers and indexes on it without starting it: its API server is a
// closed loopback port nothing ever calls, and its RESTMapper knows only
// the kinds given, namespaced or cluster-scoped.
func UnstartedManager(t testing.TB, namespaced []schema.GroupVersionKind, clusterScoped ...schema.GroupVersionKind) manager.Manager {
	t.Helper()
	m, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{
		Scheme:  Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
			rm := meta.NewDefaultRESTMapper(nil)
			for _, gvk := range namespaced {
				rm.Add(gvk, meta.RESTScopeNamespace)
			}
			for _, gvk := range clusterScoped {
				rm.Add(gvk, meta.RESTScopeRoot)
			}
			return rm, nil
		},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
