package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// kwokNodeAnnotation marks the nodes Karpenter's kwok provider creates; the
// kwok controller manages exactly those.
const kwokNodeAnnotation = "kwok.x-k8s.io/node=fake"

// installCRDs creates the CRDs shipped with the tools (NodePool, NodeClaim,
// NodeOverlay, CapacityBuffer, KWOKNodeClass) and waits until each is
// Established: Karpenter's readiness check fails until they are served.
func (c *Cluster) installCRDs(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(c.tools.crdDir(), "*.yaml"))
	if err != nil {
		return fmt.Errorf("listing CRD files: %w", err)
	}
	if len(files) == 0 {
		return fmt.Errorf("listing CRD files: none in %s", c.tools.crdDir())
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("reading CRD: %w", err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			return fmt.Errorf("decoding CRD %s: %w", filepath.Base(f), err)
		}
		if err := c.client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		err := c.waitFor(ctx, "CRD "+name+" Established", c.process("kube-apiserver"), func(ctx context.Context) error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.client.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
				return err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("not Established yet")
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// startKarpenter runs Karpenter's kwok provider. It reads its settings from
// the environment; it binds metrics and health on every interface, which is
// why the cluster lives in a private namespace.
func (c *Cluster) startKarpenter(ctx context.Context) error {
	env := []string{
		"KUBECONFIG=" + c.kubeconfig,
		"DISABLE_LEADER_ELECTION=true",
		"SYSTEM_NAMESPACE=kube-system",
		"METRICS_PORT=" + strconv.Itoa(c.ports.karpenterMetrics),
		"HEALTH_PROBE_PORT=" + strconv.Itoa(c.ports.karpenterHealth),
		// Short batching windows: tests wait seconds, not the default 10 s,
		// for a NodeClaim.
		"BATCH_IDLE_DURATION=1s",
		"BATCH_MAX_DURATION=3s",
	}
	env = append(env, c.opts.KarpenterEnv...)
	p, err := c.launch("karpenter", defaultStopGrace, env, "karpenter-kwok")
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/readyz", c.ports.karpenterHealth), false)
}

// startKwok runs the kwok controller, which plays kubelet for the nodes
// Karpenter creates: it makes them Ready, keeps their leases and moves their
// pods through the stages in stages.yaml (without it nodes never turn Ready).
func (c *Cluster) startKwok(ctx context.Context) error {
	p, err := c.launch("kwok", defaultStopGrace,
		// kwok reads ~/.kwok/kwok.yaml if present: keep it in the run folder.
		[]string{"KWOK_WORKDIR=" + filepath.Join(c.dir, "kwok")},
		"kwok",
		"--kubeconfig="+c.kubeconfig,
		"--config="+c.tools.kwokStages(),
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation,
		"--server-address="+fmt.Sprintf("127.0.0.1:%d", c.ports.kwok),
		"--node-ip=127.0.0.1",
	)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports.kwok), false)
}
