package imagearch

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/docker/docker-credential-helpers/credentials"
	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
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

// tenantImage makes reg private (basic auth) with private/app:v1
// (linux/arm64) and gives the namespace team-a, and only it, a pull secret
// for it under host; a and b are team-a's credentials and team-b's (none).
func tenantImage(t *testing.T, reg *testRegistry, host string) (digest v1.Hash, kube *fake.Clientset, a, b Credentials) {
	t.Helper()
	reg.user, reg.pass = "robot", "s3cr3t-pa55"
	_, digest = reg.pushIndex("private/app:v1", false, entryOf{platform: plat("linux", "arm64", "")})
	kube = fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "regcred"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(t, host, reg.user, reg.pass)},
	})
	reg.resetCounts()
	return digest, kube, Credentials{Namespace: "team-a", ImagePullSecrets: []string{"regcred"}}, Credentials{Namespace: "team-b"}
}

// wantRefused fails unless err is the registry's 401 and no platform came
// with it.
func wantRefused(t *testing.T, who string, ps []Platform, err error) {
	t.Helper()
	if te := (*transport.Error)(nil); !errors.As(err, &te) || te.StatusCode != http.StatusUnauthorized || ps != nil {
		t.Fatalf("%s: %v, %v; want the registry's 401 and no platforms", who, ps, err)
	}
}

// A private ECR image of another account, which only namespace team-a's pull
// secret can read (apportion's own AWS identity cannot): the platforms
// team-a read are not served to team-b, which has no credentials for it. The
// pull secrets come before ECR in the keychain, so an ECR host does not mean
// apportion's own identity signed the request.
func TestTenantPlatformsOfECRStayWithTheirCredentials(t *testing.T) {
	const ecrHost = "111122223333.dkr.ecr.eu-west-1.amazonaws.com"
	reg := newTLSTestRegistry(t)
	digest, kube, a, b := tenantImage(t, reg, ecrHost)
	for name, ref := range map[string]string{"tag": ecrHost + "/private/app:v1", "digest": ecrHost + "/private/app@" + digest.String()} {
		t.Run(name, func(t *testing.T) {
			in := newTestInspector(kube, Options{
				Transport:  reg.reachedAs(),
				Registries: policy(t, `{"allow":["127.0.0.1","`+ecrHost+`"]}`),
			})
			// apportion's own identity, which has no access to the other account.
			var ownIdentity atomic.Int64
			in.ecr = authn.NewKeychainFromHelper(ecrOnly{helperFunc(func(string) (string, string, error) {
				ownIdentity.Add(1)
				return "", "", credentials.NewErrCredentialsNotFound()
			})})

			ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, a)
			if err != nil || !slices.Equal(platformStrings(ps), []string{"linux/arm64"}) {
				t.Fatalf("team-a with its pull secret: %v, %v; want linux/arm64", ps, err)
			}
			reg.resetCounts()
			ps, err = in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, b)
			wantRefused(t, "team-b, without credentials, after team-a read the image", ps, err)
			res, err := in.Pod(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "p"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: ref}}}})
			if res != nil {
				t.Fatalf("a pod of team-b, after team-a read the image: architectures %v, want the registry's 401", res.Architectures)
			}
			wantRefused(t, "a pod of team-b, after team-a read the image", nil, err)
			if reg.refused.Load() == 0 || ownIdentity.Load() == 0 {
				t.Errorf("team-b's look-up was answered without asking the registry with its own credentials (%d refused, %d asks of apportion's identity)",
					reg.refused.Load(), ownIdentity.Load())
			}
			// team-a's next look-up is still served from the cache.
			reg.resetCounts()
			if _, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, a); err != nil {
				t.Fatal(err)
			}
			if g := reg.manifestGets.Load(); g != 0 {
				t.Errorf("%d manifest GETs for team-a's cached platforms, want 0", g)
			}
		})
	}
}

// A failure met with a namespace's own credentials is that namespace's: the
// registry answered team-a's signed request with a 500, and team-b, without
// credentials, gets its own answer, not team-a's failure.
func TestTenantFailureStaysWithItsCredentials(t *testing.T) {
	reg := newTestRegistry(t)
	_, kube, a, b := tenantImage(t, reg, reg.host)
	ref := reg.ref("private/app:v1")
	in := newTestInspector(kube, Options{})
	reg.status.Store(http.StatusInternalServerError)
	_, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, a)
	if te := (*transport.Error)(nil); !errors.As(err, &te) || te.StatusCode != http.StatusInternalServerError {
		t.Fatalf("team-a: error %v, want the registry's 500", err)
	}
	reg.status.Store(0)
	ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, b)
	wantRefused(t, "team-b after team-a's failure", ps, err)
}

// Concurrent look-ups of one image with different credentials are not one
// registry request: team-b, without credentials, does not wait for team-a's
// request (held by the registry) nor get its answer.
func TestTenantLookUpsAreNotCoalesced(t *testing.T) {
	reg := newTestRegistry(t)
	_, kube, a, b := tenantImage(t, reg, reg.host)
	ref := reg.ref("private/app:v1")
	in := newTestInspector(kube, Options{})
	held := reg.block()
	release := sync.OnceFunc(func() { close(held) })
	t.Cleanup(release) // a failed test releases it too
	aDone := make(chan error, 1)
	go func() {
		_, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, a)
		aDone <- err
	}()
	waitFor(t, func() bool { return reg.manifestGets.Load() > 0 }) // team-a's request is held
	type answer struct {
		ps  []Platform
		err error
	}
	bDone := make(chan answer, 1)
	go func() {
		ps, err := in.Platforms(t.Context(), ref, corev1.PullIfNotPresent, b)
		bDone <- answer{ps, err}
	}()
	var got answer
	// Joined to team-a's request, team-b would wait until it is released.
	waitFor(t, func() bool {
		select {
		case got = <-bDone:
			return true
		default:
			return false
		}
	})
	release()
	wantRefused(t, "team-b while team-a's request runs", got.ps, got.err)
	if err := <-aDone; err != nil {
		t.Errorf("team-a: %v", err)
	}
}
