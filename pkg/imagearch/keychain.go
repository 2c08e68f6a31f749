package imagearch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	ecr "github.com/awslabs/amazon-ecr-credential-helper/ecr-login"
	ecrapi "github.com/awslabs/amazon-ecr-credential-helper/ecr-login/api"
	"github.com/docker/docker-credential-helpers/credentials"
	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
)

// podKeychain is the kubelet's view of the pod's own credentials: its
// imagePullSecrets and its ServiceAccount's (GETs by name); keychainFor puts
// ECR from apportion's own identity, then anonymous, after them. Without a
// Kubernetes client (the default of `apportion webhook`: --read-pull-secrets
// off) the pod has none here (nil), and no Secret or ServiceAccount is ever
// read.
func (i *Inspector) podKeychain(ctx context.Context, creds Credentials) (authn.Keychain, error) {
	if i.kube == nil {
		return nil, nil
	}
	k, err := kauth.New(ctx, i.kube, kauth.Options{
		Namespace:          creds.Namespace,
		ServiceAccountName: creds.ServiceAccountName,
		ImagePullSecrets:   creds.ImagePullSecrets,
	})
	if err != nil {
		return nil, fmt.Errorf("reading pull secrets of %s/%s: %w", creds.Namespace, creds.ServiceAccountName, err)
	}
	return k, nil
}

// ownKeychain is the part of a look-up's keychain that holds credentials of
// the pod's own (its pull secrets and its ServiceAccount's, or the keychain a
// caller gave), as opposed to apportion's identity, which is the same for
// every pod (ECR through IRSA or EKS Pod Identity, or anonymous access). It
// records whether it answered for the look-up's requests: with credentials
// (then they signed the requests, whatever the registry's host: the pull
// secrets come before ECR) or with an error. The answer of such a look-up is
// kept for the same credentials only (see fetch): a pod whose credentials
// could not have read a private image learns nothing about it from apportion,
// not even its architectures. Recording costs no request: the keychain is
// resolved once anyway, before the first one.
type ownKeychain struct {
	authn.Keychain
	used atomic.Bool
}

func (o *ownKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	return o.ResolveContext(context.Background(), r)
}

func (o *ownKeychain) ResolveContext(ctx context.Context, r authn.Resource) (authn.Authenticator, error) {
	a, err := authn.Resolve(ctx, o.Keychain, r)
	if err != nil || a != authn.Anonymous {
		o.used.Store(true)
	}
	return a, err
}

// answered says whether o answered for the look-up; a nil o (no credentials
// of the pod's own) never does.
func (o *ownKeychain) answered() bool { return o != nil && o.used.Load() }

// ECRKeychain gives ECR credentials from the process's own AWS identity (IRSA,
// Pod Identity, instance profile), through amazon-ecr-credential-helper's
// ecr-login helper, as k8schain composes it. Only ECR hosts reach the helper:
// for any other registry it answers "no credentials" without any AWS or
// network work (the helper itself would log an error for each).
func ECRKeychain() authn.Keychain {
	return authn.NewKeychainFromHelper(ecrOnly{ecr.NewECRHelper(ecr.WithLogger(io.Discard))})
}

// ecrOnly passes ECR hosts to the helper and turns its panics (it panics when
// the AWS configuration cannot be loaded) into "no credentials".
type ecrOnly struct {
	h interface {
		Get(serverURL string) (string, string, error)
	}
}

func (e ecrOnly) Get(serverURL string) (user, secret string, err error) {
	if !IsECR(serverURL) {
		return "", "", credentials.NewErrCredentialsNotFound()
	}
	defer func() {
		if r := recover(); r != nil {
			user, secret, err = "", "", fmt.Errorf("ecr-login: %v", r)
		}
	}()
	return e.h.Get(serverURL)
}

// IsECR says whether host (a registry host, optionally with a scheme) is an
// Amazon ECR registry, private or public, by the helper's own pattern.
func IsECR(host string) bool {
	_, err := ecrapi.ExtractRegistry(host)
	return err == nil
}

// DockerConfigKeychain reads a docker config JSON (a kubernetes.io/dockerconfigjson
// Secret's .dockerconfigjson, or ~/.docker/config.json's "auths") and matches
// its entries as the kubelet matches a pull secret's.
func DockerConfigKeychain(ctx context.Context, dockerConfigJSON []byte) (authn.Keychain, error) {
	if len(dockerConfigJSON) == 0 {
		return nil, errors.New("empty docker config")
	}
	return kauth.NewFromPullSecrets(ctx, []corev1.Secret{{
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON},
	}})
}

// credentialHint adds to a registry's refusal (401 or 403) what the user can
// change when the default keychain could not have had the credentials:
// for ECR, apportion's own AWS identity; for any other registry, the pod's
// image pull secrets when they were not read (no Kubernetes client, i.e.
// --read-pull-secrets off). A pod that names no pull secret gets no hint:
// the API server copies its ServiceAccount's into the pod, so reading them
// would not help. The error still unwraps to the transport.Error.
func (i *Inspector) credentialHint(host string, creds Credentials, err error) error {
	te := (*transport.Error)(nil)
	if i.opts.Keychain != nil || !errors.As(err, &te) ||
		(te.StatusCode != http.StatusUnauthorized && te.StatusCode != http.StatusForbidden) {
		return err
	}
	switch {
	case IsECR(host):
		return &hintError{err, "ECR is read with apportion's own AWS identity: give its ServiceAccount an IAM role (IRSA or EKS Pod Identity) allowed to read this repository"}
	case i.kube == nil && len(creds.ImagePullSecrets) > 0:
		return &hintError{err, fmt.Sprintf("the pod's image pull secrets (%s) were not used: apportion reads them only with the chart's settings.readPullSecrets=true (--read-pull-secrets)",
			strings.Join(creds.ImagePullSecrets, ", "))}
	}
	return err
}

// hintError is a registry error with a hint for the user appended.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + "; " + e.hint }
func (e *hintError) Unwrap() error { return e.err }
