package operator

import (
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/apportion-dev/apportion/pkg/options"
)

// pullSecretsClient is the Kubernetes client the image Inspector reads the
// pods' image pull secrets and ServiceAccounts with: only with
// --read-pull-secrets. Without it there is no client at all (nil), so the
// Inspector cannot read a Secret or a ServiceAccount, and registries are
// asked with apportion's own identity (ECR through IRSA or EKS Pod Identity)
// or anonymously. newClient is called only with the setting on.
func pullSecretsClient(o *options.Options, newClient func() (kubernetes.Interface, error)) (kubernetes.Interface, error) {
	if !o.ReadPullSecrets {
		return nil, nil
	}
	// The Kubernetes keychain reads the ServiceAccount and the pull Secrets
	// by name, on cache misses only: a direct client, no informer on
	// Secrets.
	kube, err := newClient()
	if err != nil {
		return nil, fmt.Errorf("creating the clientset for image pull secrets: %w", err)
	}
	return kube, nil
}
