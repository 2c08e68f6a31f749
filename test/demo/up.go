package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

const (
	// gateTimeout is how long apportion may hold a pod before releasing it
	// undecided (the webhook's default).
	gateTimeout = 30 * time.Second
	// podsTimeout bounds the wait for the examples' pods. They run within
	// about 10 s on 2 cores; the rest is room for a busy machine.
	podsTimeout = 4 * time.Minute
)

// examples are the manifests the demo deploys, relative to the repository.
var examples = []string{"examples/aws-sample-nginx.yaml", "examples/eks-blog-alpine.yaml"}

// up starts a fresh demo: tools, cluster, NodePools, apportion, examples,
// then waits for the pods and prints the table.
func up(l layout) error {
	ctx := context.Background()
	root := framework.RepoRoot()

	bin, err := tools(ctx, root)
	if err != nil {
		return err
	}
	if _, err := cluster.KubeconfigDetached(l.state); err == nil {
		say("stopping the previous demo cluster")
	}
	if err := teardown(l); err != nil {
		return err
	}

	var apportion string
	err = step("built apportion", func() error {
		var out bytes.Buffer
		apportion, err = framework.BuildApportion(ctx, l.bin(), &out)
		return withOutput(err, &out)
	})
	if err != nil {
		return errors.Join(err, teardown(l))
	}

	var c *cluster.Cluster
	err = step("started the cluster (etcd, API server, controller-manager, scheduler, Karpenter, kwok)", func() error {
		var progress bytes.Buffer
		startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		c, err = cluster.Start(startCtx, cluster.Options{
			BinDir: bin, Karpenter: true, Detached: true, StateDir: l.state, Progress: &progress,
		})
		return withOutput(err, &progress)
	})
	if err != nil {
		// Start has stopped what it started; the demo's files go too.
		return errors.Join(err, teardown(l))
	}
	// The cluster now outlives this process: a failure from here on leaves
	// it up for a look, and says how to get rid of it.
	if err := deploy(ctx, c, l, root, apportion); err != nil {
		say(fmt.Sprintf("the cluster is left running for a look: export KUBECONFIG=%s; logs in %s; make demo-down stops it",
			c.Kubeconfig(), c.LogDir()))
		return err
	}
	fmt.Printf("\nexport KUBECONFIG=%s\n", c.Kubeconfig())
	fmt.Printf("kubectl is %s; make demo-down stops the demo and removes %s\n", filepath.Join(bin, "kubectl"), l.state)
	return nil
}

// deploy does everything after the cluster start, up to the table.
func deploy(ctx context.Context, c *cluster.Cluster, l layout, root, apportion string) error {
	kube := c.Client()
	err := step("applied the NodePools (test/testdata/karpenter, test/demo/nodepools.yaml)", func() error {
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
	if err := startApportion(ctx, c, l, apportion); err != nil {
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
	fmt.Println("PODS and NODES are read from the cluster (the labels of each pod's node); WANT is what the quota property allows: the floor or ceiling of each group's ideal share (apportion plan).")
	if off > 0 {
		return fmt.Errorf("%d of %d Deployments are not split as their strategy asks (see the ✗ lines)", off, len(sections))
	}
	return nil
}

// startApportion runs one `apportion webhook` replica inside the cluster,
// waits until it serves and leads, and registers its webhooks by URL.
func startApportion(ctx context.Context, c *cluster.Cluster, l layout, bin string) error {
	return step("started apportion webhook and registered it", func() error {
		kube := c.Client()
		if err := ensureNamespace(ctx, kube, framework.SystemNamespace); err != nil {
			return err
		}
		if err := os.MkdirAll(l.certDir(), 0o700); err != nil {
			return fmt.Errorf("creating the certificate folder: %w", err)
		}
		if _, _, err := c.IssueServingCert(l.certDir()); err != nil {
			return fmt.Errorf("issuing the webhook certificate: %w", err)
		}
		// Started through the cluster, so the state file lists it and
		// make demo-down stops it with the rest.
		r, err := framework.StartReplica(c, bin, l.certDir(), "apportion", gateTimeout)
		if err != nil {
			return fmt.Errorf("starting apportion webhook: %w", err)
		}
		readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := r.WaitReady(readyCtx); err != nil {
			return fmt.Errorf("%w (log: %s)", err, filepath.Join(c.LogDir(), r.Name+".log"))
		}
		// The webhook gates pods only while a placement leader is alive:
		// registering before the Lease is fresh would let the examples'
		// first pods through undecided.
		if err := poll(readyCtx, func() bool { return framework.LeaderAlive(readyCtx, kube) }); err != nil {
			return fmt.Errorf("waiting for a fresh Lease %s/%s: %w", framework.SystemNamespace, framework.LeaseName, err)
		}
		return framework.Register(ctx, kube, c.CABundle(), r.Port)
	})
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

// withOutput prints the captured output of a step that failed, above its
// error; a step that went well stays quiet.
func withOutput(err error, out *bytes.Buffer) error {
	if err == nil {
		return nil
	}
	if s := strings.TrimSpace(out.String()); s != "" {
		fmt.Fprintln(os.Stderr, s)
	}
	return err
}

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
