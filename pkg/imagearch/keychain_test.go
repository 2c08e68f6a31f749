package imagearch

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

const pullSecretsHint = "settings.readPullSecrets=true (--read-pull-secrets)"

// Without a Kubernetes client no pull secret is read; a private image named
// with a pull secret fails with the registry's 401 and a hint at the
// setting, a pod without pull secrets gets the bare 401.
func TestWithoutClientThePullSecretsHint(t *testing.T) {
	reg := newTestRegistry(t)
	reg.user, reg.pass = "robot", "s3cr3t-pa55"
	ref, _ := reg.pushIndex("private/app:v1", false, entryOf{platform: plat("linux", "arm64", "")})
	in := newTestInspector(nil, Options{})

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}, Spec: corev1.PodSpec{
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "other"}},
		Containers:       []corev1.Container{{Name: "app", Image: ref}},
	}}
	_, err := in.Pod(t.Context(), pod)
	if te := (*transport.Error)(nil); !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized {
		t.Fatalf("error = %v, want the registry's 401", err)
	}
	if !isImageError(err) {
		t.Errorf("the hint hides the 401 from the breaker: %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, pullSecretsHint) || !strings.Contains(msg, "(regcred, other)") {
		t.Errorf("error = %q, want the hint naming the pod's pull secrets and the setting", msg)
	}

	pod = pod.DeepCopy()
	pod.Namespace, pod.Spec.ImagePullSecrets = "bare", nil
	_, err = in.Pod(t.Context(), pod)
	if err == nil || strings.Contains(err.Error(), "readPullSecrets") {
		t.Errorf("a pod without pull secrets: error %v, want a 401 without the hint (reading secrets would not help)", err)
	}
}

// With a client the pull secrets were read: a refusal gets no hint at the
// setting (the secret itself is wrong).
func TestWithClientNoPullSecretsHint(t *testing.T) {
	reg := newTestRegistry(t)
	reg.user, reg.pass = "robot", "s3cr3t-pa55"
	ref, _ := reg.pushIndex("private/app:v1", false, entryOf{platform: plat("linux", "arm64", "")})
	kube := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "regcred"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(t, reg.host, reg.user, "wrong")},
	})
	_, err := newTestInspector(kube, Options{}).Platforms(t.Context(), ref, corev1.PullIfNotPresent, Credentials{Namespace: "team", ImagePullSecrets: []string{"regcred"}})
	if te := (*transport.Error)(nil); !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized {
		t.Fatalf("error = %v, want the registry's 401", err)
	}
	if strings.Contains(err.Error(), "readPullSecrets") {
		t.Errorf("error = %q: the secrets were read, the hint is wrong here", err)
	}
}

func TestCredentialHint(t *testing.T) {
	creds := Credentials{Namespace: "team", ImagePullSecrets: []string{"regcred"}}
	const ecrHost = "111122223333.dkr.ecr.eu-west-1.amazonaws.com"
	refused := func(code int) error { return &transport.Error{StatusCode: code} }
	custom := func(context.Context, Credentials) (authn.Keychain, error) { return authn.DefaultKeychain, nil }
	withClient := New(fake.NewClientset(), Options{})
	for _, c := range []struct {
		name string
		in   *Inspector
		host string
		err  error
		want string // "" for no hint
	}{
		{"401 without pull secrets read", New(nil, Options{}), "registry.example.com", refused(http.StatusUnauthorized), pullSecretsHint},
		{"403 without pull secrets read", New(nil, Options{}), "registry.example.com", refused(http.StatusForbidden), pullSecretsHint},
		{"404 is not about credentials", New(nil, Options{}), "registry.example.com", refused(http.StatusNotFound), ""},
		{"a 500", New(nil, Options{}), "registry.example.com", refused(http.StatusInternalServerError), ""},
		{"not a registry answer", New(nil, Options{}), "registry.example.com", errors.New("dial tcp: refused"), ""},
		{"pull secrets read", withClient, "registry.example.com", refused(http.StatusUnauthorized), ""},
		{"a keychain of the caller's", New(nil, Options{Keychain: custom}), "registry.example.com", refused(http.StatusUnauthorized), ""},
		{"ECR", New(nil, Options{}), ecrHost, refused(http.StatusForbidden), "IAM role (IRSA or EKS Pod Identity)"},
		{"ECR with pull secrets read", withClient, ecrHost, refused(http.StatusUnauthorized), "IAM role (IRSA or EKS Pod Identity)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.in.credentialHint(c.host, creds, c.err)
			if c.want == "" {
				if got != c.err { //nolint:errorlint // the very error must come back, not one wrapping it
					t.Errorf("got %v, want the error unchanged", got)
				}
				return
			}
			if !strings.Contains(got.Error(), c.want) || !strings.HasPrefix(got.Error(), c.err.Error()+"; ") || !errors.Is(got, c.err) {
				t.Errorf("got %q, want %q appended to %q, unwrapping to it", got, c.want, c.err)
			}
		})
	}
}
