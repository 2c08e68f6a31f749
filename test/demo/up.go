package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	// demoVersion is the release the demo builds and installs.
	demoVersion = "v0.0.0-demo"
	// chartNamespace and the release names are the README's.
	chartNamespace = "apportion-system"
	crdRelease     = "apportion-crd"
	release        = "apportion"
	// leaseName is the chart's placement Lease: the release's full name.
	leaseName = "apportion"
	// agentTimeout bounds the cluster's start by the agent.
	agentTimeout = 6 * time.Minute
	// podsTimeout bounds the wait for the examples' pods. They run within
	// about 10 s on 2 cores; the rest is room for a busy machine.
	podsTimeout = 4 * time.Minute
)

// examples are the manifests the demo deploys, relative to the repository.
var examples = []string{"examples/aws-sample-nginx.yaml", "examples/eks-blog-alpine.yaml"}

// valuesFile holds the chart values that fit the local cluster, relative to
// the repository.
const valuesFile = "test/demo/values.yaml"

// up starts a fresh demo: tools, release, cluster with registry and
// kubelet (the agent), NodePools, push, helm install, examples, then waits
// for the pods and prints the table.
func up(l layout) error {
	ctx := context.Background()
	root := framework.RepoRoot()

	bin, err := tools(ctx, root)
	if err != nil {
		return err
	}
	if _, err := cluster.KubeconfigDetached(l.state); err == nil {
		say("stopping the previous demo")
	}
	if err := teardown(l); err != nil {
		return err
	}
	if err := os.MkdirAll(l.own, 0o755); err != nil {
		return err
	}

	r := &runner{root: root, bin: bin, helmHome: l.helm(), releaseDir: l.releaseDir()}
	tag := strings.TrimPrefix(demoVersion, "v")
	build := []string{"make", "release", "VERSION=" + demoVersion, "RELEASE_PLATFORMS=linux/" + runtime.GOARCH, "RELEASE_DIR=" + r.releaseDir}
	if err := step("built the release "+demoVersion+" for linux/"+runtime.GOARCH+" (make release)", func() error { _, err := r.run(ctx, build...); return err }); err != nil {
		return errors.Join(err, teardown(l))
	}

	var info agentInfo
	err = step("started the cluster (etcd, API server, controller-manager, scheduler, Karpenter, kwok), a registry and a kubelet (demo agent)", func() error {
		info, err = startAgent(ctx, l, bin, agentTimeout)
		return err
	})
	if err != nil {
		say("the demo agent's log ends with:\n" + framework.TailFile(l.agentLog(), 40))
		return errors.Join(err, teardown(l))
	}
	r.kubeconfig = info.Kubeconfig
	// The cluster now outlives this process: a failure from here on leaves
	// it up for a look, and says how to get rid of it.
	if err := deploy(ctx, r, info, root, tag); err != nil {
		say(fmt.Sprintf("the demo is left running for a look: export KUBECONFIG=%s; logs in %s; make demo-down stops it",
			info.Kubeconfig, info.LogDir))
		return err
	}
	fmt.Printf("\nThe demo ran these commands; from this shell (repository root) they reach the demo cluster and its registry:\n\n")
	fmt.Printf("  export KUBECONFIG=%s\n", info.Kubeconfig)
	fmt.Printf("  export PATH=%s:$PATH   # the cluster's kubectl and helm\n", bin)
	for _, cmd := range r.ran {
		fmt.Printf("  %s\n", cmd)
	}
	fmt.Printf("\nRun them again after `helm uninstall %s -n %s`. Logs: %s. make demo-down stops the demo and removes %s\n",
		release, chartNamespace, info.LogDir, l.state)
	fmt.Printf("\nSee every split and why a pod went where it did, with the released binary (or as `kubectl apportion`, linked as kubectl-apportion on $PATH):\n\n")
	fmt.Printf("  %s status -A\n", l.releasedBinary())
	fmt.Printf("  %s explain deployment/nginx -n test\n", l.releasedBinary())
	return nil
}

// deploy does everything after the cluster start, up to the table.
func deploy(ctx context.Context, r *runner, info agentInfo, root, tag string) error {
	kube, err := hostClient(info.Kubeconfig)
	if err != nil {
		return err
	}
	err = step("applied the NodePools (test/testdata/karpenter, test/demo/nodepools.yaml)", func() error {
		for _, path := range []string{filepath.Join(root, "test", "testdata", "karpenter"), filepath.Join(root, "test", "demo", "nodepools.yaml")} {
			if err := framework.Apply(ctx, kube, path); err != nil {
				return fmt.Errorf("applying %s: %w", path, err)
			}
		}
		readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return framework.WaitNodePoolsReady(readyCtx, kube)
	})
	if err != nil {
		return err
	}
	if err := install(ctx, r, kube, info, tag); err != nil {
		return err
	}

	workloads, err := readExamples(root)
	if err != nil {
		return err
	}
	err = step("deployed "+strings.Join(examples, ", "), func() error {
		for i, w := range workloads {
			if err := ensureNamespace(ctx, kube, w.Namespace); err != nil {
				return err
			}
			if err := framework.Apply(ctx, kube, filepath.Join(root, examples[i])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}

	waitErr := waitRunning(ctx, kube, workloads, podsTimeout)
	// The table is printed even after a timeout: it shows what did happen.
	fmt.Println()
	return errors.Join(waitErr, printTable(ctx, kube, workloads))
}

// install pushes the release to the agent's registry and installs the
// charts from there, as the README's "Install on EKS from an OCI registry"
// does, then waits for a placement leader.
func install(ctx context.Context, r *runner, kube client.Client, info agentInfo, tag string) error {
	reg := info.Registry
	// Unsigned: the demo's registry and release live and die on this
	// machine; a published release is signed (docs/verifying-releases.md).
	push := []string{"make", "release-push", "VERSION=" + demoVersion, "RELEASE_DIR=" + r.releaseDir, "REGISTRY=" + reg, "INSECURE=1", "UNSIGNED=1"}
	err := step("pushed the release to the registry "+reg+" (make release-push)", func() error {
		out, err := r.run(ctx, push...)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(line, "image ") || strings.HasPrefix(line, "chart ") {
				say("  " + line)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	crd := []string{"helm", "install", crdRelease, "oci://" + reg + "/charts/apportion-crd", "--version", tag, "--plain-http",
		"-n", chartNamespace, "--create-namespace"}
	app := []string{"helm", "install", release, "oci://" + reg + "/charts/apportion", "--version", tag, "--plain-http",
		"-n", chartNamespace, "-f", valuesFile, "--set", "controller.image.repository=" + reg + "/apportion",
		"--wait", "--timeout", "4m"}
	err = step("installed the charts apportion-crd and apportion from oci://"+reg+"/charts (helm install)", func() error {
		if _, err := r.run(ctx, crd...); err != nil {
			return err
		}
		if _, err := r.run(ctx, app...); err != nil {
			return fmt.Errorf("%w\nkubelet log:\n%s", err, framework.TailFile(filepath.Join(info.LogDir, "kubelet.log"), 20))
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The webhook gates pods only while a placement leader is alive:
	// deploying before the Lease is fresh would let the examples' first
	// pods through undecided.
	return step("apportion elected a placement leader (Lease "+chartNamespace+"/"+leaseName+")", func() error {
		leadCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := poll(leadCtx, func() bool {
			return framework.LeaseAlive(leadCtx, kube, client.ObjectKey{Namespace: chartNamespace, Name: leaseName})
		}); err != nil {
			return fmt.Errorf("waiting for a fresh Lease %s/%s: %w", chartNamespace, leaseName, err)
		}
		return nil
	})
}

// runner runs the commands a user would type, from the repository root on
// the host, and remembers them for the summary.
type runner struct {
	root, bin, helmHome, releaseDir, kubeconfig string
	ran                                         []string
}

// run runs args (make or the cluster's helm) and returns the combined
// output; a failure carries the output.
func (r *runner) run(ctx context.Context, args ...string) (string, error) {
	name := args[0]
	if name == "helm" {
		name = filepath.Join(r.bin, "helm")
	}
	cmd := exec.CommandContext(ctx, name, args[1:]...)
	cmd.Dir = r.root
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=auto", "PATH="+r.bin+":"+os.Getenv("PATH"),
		// Helm's cache and settings stay in the demo's folder.
		"HELM_CACHE_HOME="+filepath.Join(r.helmHome, "cache"), "HELM_CONFIG_HOME="+filepath.Join(r.helmHome, "config"),
		"HELM_DATA_HOME="+filepath.Join(r.helmHome, "data"))
	if r.kubeconfig != "" {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+r.kubeconfig)
	}
	line := strings.Join(args, " ")
	say("$ " + line)
	r.ran = append(r.ran, line)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", line, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// hostClient connects to the demo cluster from the host, through the
// kubeconfig `up` prints.
func hostClient(kubeconfig string) (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	// Importing Karpenter's API package (through test/framework) registers
	// its kinds in client-go's scheme, which is all the demo reads.
	kube, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the demo cluster: %w", err)
	}
	return kube, nil
}

// printTable prints the table for the workloads and fails when one of them
// is off its split.
func printTable(ctx context.Context, kube client.Client, workloads []*plan.Workload) error {
	sections, err := collect(ctx, kube, workloads)
	if err != nil {
		return err
	}
	off, err := render(os.Stdout, sections)
	if err != nil {
		return err
	}
	fmt.Println("PODS and NODES are read from the cluster (the labels of each pod's node); QUOTA is what the exactness guarantee allows: the floor or ceiling of each group's ideal share (apportion plan's FLOOR and CEILING; QUOTA NOW in apportion explain).")
	if off > 0 {
		return fmt.Errorf("%d of %d Deployments are not split as their strategy asks (see the ✗ lines)", off, len(sections))
	}
	return nil
}

// tools builds the cluster's programs if they are missing and returns their
// folder.
func tools(ctx context.Context, root string) (string, error) {
	script := filepath.Join(root, "test", "tools", "build.sh")
	out, err := exec.CommandContext(ctx, "bash", script, "--print-dir").Output()
	if err != nil {
		return "", fmt.Errorf("running %s --print-dir: %w", script, err)
	}
	if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(out)), "karpenter-kwok")); err != nil {
		say("building the cluster tools: the first build compiles Kubernetes, etcd, Karpenter and kwok from source and takes 10+ minutes on 2 cores")
	}
	bin, err := cluster.BuildTools(ctx, os.Stderr)
	if err != nil {
		return "", fmt.Errorf("building the cluster tools: %w", err)
	}
	return bin, nil
}

// readExamples reads the example Deployments, in the order of examples.
func readExamples(root string) ([]*plan.Workload, error) {
	var out []*plan.Workload
	for _, ex := range examples {
		w, err := readWorkload(filepath.Join(root, ex))
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

func readWorkload(path string) (*plan.Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading example: %w", err)
	}
	defer func() { _ = f.Close() }()
	w, err := plan.ReadWorkload(f)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if w.Kind != "Deployment" || w.Replicas == nil {
		return nil, fmt.Errorf("reading %s: the demo wants a Deployment with spec.replicas, got %s", path, w)
	}
	if w.Namespace == "" {
		w.Namespace = "default"
	}
	return w, nil
}

func ensureNamespace(ctx context.Context, kube client.Client, name string) error {
	err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// step runs fn and reports it as one line with its duration.
func step(what string, fn func() error) error {
	t0 := time.Now()
	if err := fn(); err != nil {
		return err
	}
	say(fmt.Sprintf("%s (%s)", what, time.Since(t0).Round(100*time.Millisecond)))
	return nil
}

func say(msg string) { fmt.Fprintln(os.Stderr, "demo: "+msg) }

// poll calls ok every 200 ms until it is true or ctx ends.
func poll(ctx context.Context, ok func() bool) error {
	for !ok() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}
