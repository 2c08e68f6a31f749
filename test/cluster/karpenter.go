package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// kwokNodeAnnotation marks the nodes Karpenter's kwok provider creates; the
// kwok controller manages exactly those.
const kwokNodeAnnotation = "kwok.x-k8s.io/node=fake"

// PodCIDR is the range kwok gives pod IPs from (its --cidr; kwok prefers a
// node's spec.podCIDR, which nothing sets here). It does not overlap the
// Service range 10.0.0.0/24, so an address from it put on lo with
// AddLoopbackAddress is never mistaken for a ClusterIP.
const PodCIDR = "10.244.0.0/16"

// ProcessPodLabel marks a pod whose process the test runs itself: kwok's
// pod stages leave such a pod alone. It stays Pending, without a pod IP,
// until the test writes its status (Running and Ready with a pod IP, or
// Succeeded), and once deleted it stays, terminating, until the test
// removes it (grace period 0) after its process has exited, as a kubelet
// would. kwok's pod-delete stage would remove it at once, and with it the
// validity of the ServiceAccount token bound to it, while the process still
// runs its preStop sleep and shutdown. Any value counts, even "".
const ProcessPodLabel = "e2e.apportion.dev/process"

// processPodStages are the kwok stages that must skip ProcessPodLabel pods.
var processPodStages = []string{"pod-ready", "pod-complete", "pod-delete"}

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
// pods through the stages in stages.yaml (without it nodes never turn Ready),
// from a copy in the run folder whose pod-ready and pod-complete stages skip
// ProcessPodLabel pods. Pod IPs come from PodCIDR.
func (c *Cluster) startKwok(ctx context.Context) error {
	stages, err := os.ReadFile(c.tools.kwokStages())
	if err != nil {
		return fmt.Errorf("reading kwok stages: %w", err)
	}
	config, err := kwokConfig(stages)
	if err != nil {
		return fmt.Errorf("%s: %w", c.tools.kwokStages(), err)
	}
	configPath := filepath.Join(c.dir, "kwok-stages.yaml")
	if err := os.WriteFile(configPath, config, 0o644); err != nil {
		return fmt.Errorf("writing kwok stages: %w", err)
	}
	p, err := c.launch("kwok", defaultStopGrace,
		// kwok reads ~/.kwok/kwok.yaml if present: keep it in the run folder.
		[]string{"KWOK_WORKDIR=" + filepath.Join(c.dir, "kwok")},
		"kwok",
		"--kubeconfig="+c.kubeconfig,
		"--config="+configPath,
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation,
		"--server-address="+fmt.Sprintf("127.0.0.1:%d", c.ports.kwok),
		"--node-ip=127.0.0.1",
		"--cidr="+PodCIDR,
	)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports.kwok), false)
}

// kwokConfig returns the stages (build.sh's stages.yaml, several YAML
// documents) with a requirement added to the selector of each of
// processPodStages: the pod has no ProcessPodLabel. kwok's selector keys
// are jq-like queries on the object; DoesNotExist matches when the query
// yields nothing (a label with the value "" does exist).
func kwokConfig(stages []byte) ([]byte, error) {
	notProcessPod := map[string]any{
		"key":      fmt.Sprintf(".metadata.labels[%q]", ProcessPodLabel),
		"operator": "DoesNotExist",
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stages)))
	var out bytes.Buffer
	out.WriteString("# kwok stages for the local cluster: build.sh's stages.yaml, with pods\n" +
		"# labelled " + ProcessPodLabel + " left out of " + strings.Join(processPodStages, " and ") + ".\n")
	patched := map[string]bool{}
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading a YAML document: %w", err)
		}
		obj := map[string]any{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("decoding a YAML document: %w", err)
		}
		if len(obj) == 0 {
			continue // only comments
		}
		u := unstructured.Unstructured{Object: obj}
		if u.GetKind() == "Stage" && slices.Contains(processPodStages, u.GetName()) {
			exprs, _, err := unstructured.NestedSlice(obj, "spec", "selector", "matchExpressions")
			if err != nil {
				return nil, fmt.Errorf("stage %s: %w", u.GetName(), err)
			}
			exprs = append(exprs, notProcessPod)
			if err := unstructured.SetNestedSlice(obj, exprs, "spec", "selector", "matchExpressions"); err != nil {
				return nil, fmt.Errorf("stage %s: %w", u.GetName(), err)
			}
			patched[u.GetName()] = true
		}
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("encoding stage %s: %w", u.GetName(), err)
		}
		out.WriteString("---\n")
		out.Write(data)
	}
	for _, name := range processPodStages {
		if !patched[name] {
			return nil, fmt.Errorf("no kwok Stage %s to keep %s pods out of", name, ProcessPodLabel)
		}
	}
	return out.Bytes(), nil
}
