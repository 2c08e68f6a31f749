package cluster

import (
	"fmt"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

const contextName = "apportion-local"

// writeKubeconfig writes an admin kubeconfig with the certificates inline,
// so it stays valid wherever it is copied, and builds the in-process client.
func (c *Cluster) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{
		Server:                   c.APIServerURL(),
		CertificateAuthorityData: c.pki.certPEM,
	}
	cfg.AuthInfos[contextName] = &clientcmdapi.AuthInfo{
		ClientCertificateData: c.admin.certPEM,
		ClientKeyData:         c.admin.keyPEM,
	}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName}
	cfg.CurrentContext = contextName
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if c.opts.Detached {
		// A stable path for the demo's `export KUBECONFIG=...` line.
		c.kubeconfig = filepath.Join(c.opts.StateDir, "kubeconfig")
	}
	if err := clientcmd.WriteToFile(*cfg, c.kubeconfig); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}

	c.restConfig = &rest.Config{
		Host: c.APIServerURL(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.pki.certPEM,
			CertData: c.admin.certPEM,
			KeyData:  c.admin.keyPEM,
		},
		// The test process stays in the host namespace; its connections
		// are opened from inside the cluster's.
		Dial: c.ns.dial,
		// Tests create hundreds of pods; client-go's default 5 QPS would
		// make them measure the client, not the cluster.
		QPS:   200,
		Burst: 400,
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	c.client, err = client.New(c.restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	return nil
}

// newScheme knows the built-in kinds, CRDs, and Karpenter's and KWOK's
// kinds. Karpenter registers its kinds in client-go's global scheme only, so
// they are added here by hand.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	karpenter := schema.GroupVersion{Group: "karpenter.sh", Version: "v1"}
	s.AddKnownTypes(karpenter, &karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	metav1.AddToGroupVersion(s, karpenter)
	kwok := schema.GroupVersion{Group: "karpenter.kwok.sh", Version: "v1alpha1"}
	s.AddKnownTypes(kwok, &kwokv1alpha1.KWOKNodeClass{}, &kwokv1alpha1.KWOKNodeClassList{})
	metav1.AddToGroupVersion(s, kwok)
	return s, nil
}
