package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// newClient makes the client of the commands that read a cluster (explain,
// status, release-gates) once connect has resolved the flags; the tests of
// the commands' examples put a fake API server's in its place.
var newClient = client.New

// kubeFlags are kubectl's cluster flags, from k8s.io/cli-runtime: every
// command that talks to a cluster takes the same ones, with the same
// meaning as in kubectl (--kubeconfig, --context, -n, --as, --token,
// --server ...).
type kubeFlags struct {
	*genericclioptions.ConfigFlags
}

func newKubeFlags() *kubeFlags {
	f := genericclioptions.NewConfigFlags(false)
	// No command reads the discovery cache: the flag would do nothing.
	f.CacheDir = nil
	return &kubeFlags{f}
}

func (k *kubeFlags) add(fs *pflag.FlagSet) {
	k.AddFlags(fs)
	fs.Lookup("namespace").Usage = "the namespace (default: the kubeconfig context's namespace, else \"default\")"
}

// addAllNamespaces registers -A, --all-namespaces, as kubectl spells it.
func addAllNamespaces(fs *pflag.FlagSet, all *bool, usage string) {
	fs.BoolVarP(all, "all-namespaces", "A", false, usage)
}

// connect resolves the flags: the connection (the kubeconfig, else
// in-cluster), with apportion's user agent, and the namespace: -n, else the
// kubeconfig context's namespace, else "default", as kubectl resolves it;
// "" with all (-A). Flags that contradict each other, or an -n that is no
// namespace name, are usage errors, found before anything is read.
func (k *kubeFlags) connect(all bool) (*rest.Config, string, error) {
	namespace := *k.Namespace
	if namespace != "" {
		if all {
			return nil, "", errors.New("--all-namespaces and --namespace exclude each other")
		}
		if problems := validation.IsDNS1123Label(namespace); len(problems) > 0 {
			return nil, "", fmt.Errorf("--namespace: %q is not a namespace name: %s", namespace, strings.Join(problems, "; "))
		}
	}
	loader := k.ToRawKubeConfigLoader()
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", failed(fmt.Errorf("reading the kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config, else in-cluster): %w", err))
	}
	cfg.UserAgent = "apportion-cli"
	// client-go's default of 5 requests a second would make release-gates
	// crawl through a large cluster; controller-runtime's defaults.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 20, 30
	}
	if namespace == "" && !all {
		// -n is among the overrides, so this is the context's namespace.
		if namespace, _, err = loader.Namespace(); err != nil {
			return nil, "", failed(fmt.Errorf("reading the context's namespace: %w", err))
		}
	}
	return cfg, namespace, nil
}
