package operator

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/apportion-dev/apportion/pkg/imagearch"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/registries"
)

// refusingRegistry answers every request 401 with a basic-auth challenge,
// on 127.0.0.1, and records the users of the credentials it was sent.
type refusingRegistry struct {
	host  string
	mu    sync.Mutex
	users []string
}

func newRefusingRegistry(t *testing.T) *refusingRegistry {
	r := &refusingRegistry{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, _, ok := req.BasicAuth(); ok {
			r.mu.Lock()
			r.users = append(r.users, u)
			r.mu.Unlock()
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(r.host, "127.0.0.1:") {
		t.Fatalf("the registry listens on %s, want 127.0.0.1", r.host)
	}
	return r
}

func (r *refusingRegistry) sawUser(u string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.users, u)
}

// The Inspector `apportion webhook` builds reads no Secret and no
// ServiceAccount unless --read-pull-secrets says so: the client it would be
// given records every call, and with the setting off it sees none, the registry
// gets no pod credentials, and the error tells how to turn the setting on.
func TestPullSecretsReadOnlyWhenAsked(t *testing.T) {
	reg := newRefusingRegistry(t)
	auth := base64.StdEncoding.EncodeToString([]byte("robot:pw"))
	config, err := json.Marshal(map[string]any{"auths": map[string]any{reg.host: map[string]string{"auth": auth}}})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"},
		Spec: corev1.PodSpec{
			ServiceAccountName: "builder",
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "regcred"}},
			Containers:         []corev1.Container{{Name: "app", Image: reg.host + "/private/app:v1"}},
		},
	}
	// The registry is on 127.0.0.1, which the default registry policy denies.
	allow, err := registries.Parse(`{"allow":["` + reg.host + `"]}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, read := range []bool{false, true} {
		kube := fake.NewClientset(
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "builder"}},
			&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "regcred"},
				Type:       corev1.SecretTypeDockerConfigJson,
				Data:       map[string][]byte{corev1.DockerConfigJsonKey: config},
			},
		)
		var mu sync.Mutex
		var calls []string
		kube.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, a.GetVerb()+" "+a.GetResource().Resource)
			return false, nil, nil
		})
		client, err := pullSecretsClient(&options.Options{ReadPullSecrets: read}, func() (kubernetes.Interface, error) { return kube, nil })
		if err != nil {
			t.Fatal(err)
		}
		in := imagearch.New(client, imagearch.Options{Registries: allow})
		_, err = in.Pod(t.Context(), pod)
		if err == nil {
			t.Fatalf("read=%v: the registry refuses everything, want an error", read)
		}
		mu.Lock()
		got := slices.Clone(calls)
		mu.Unlock()
		hinted := strings.Contains(err.Error(), "settings.readPullSecrets=true")
		if !read {
			if len(got) > 0 {
				t.Errorf("--read-pull-secrets off: the Inspector called the API: %v", got)
			}
			if reg.sawUser("robot") {
				t.Error("--read-pull-secrets off: the registry got the pull secret's credentials")
			}
			if !hinted {
				t.Errorf("--read-pull-secrets off: error %q does not say how to use the pod's pull secrets", err)
			}
			continue
		}
		for _, want := range []string{"get serviceaccounts", "get secrets"} {
			if !slices.Contains(got, want) {
				t.Errorf("--read-pull-secrets on: no %q among the API calls %v", want, got)
			}
		}
		if !reg.sawUser("robot") {
			t.Error("--read-pull-secrets on: the registry never got the pull secret's credentials")
		}
		if hinted {
			t.Errorf("--read-pull-secrets on: error %q hints at a setting that is on", err)
		}
	}
}
