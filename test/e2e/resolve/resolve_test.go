//go:build e2e

// Package resolve_test is the differential test of how apportion resolves a
// workload: a generated corpus (test/resolvecorpus: every workload kind,
// CronJobs and Argo Workflows included, annotations and typos on workloads,
// pod templates and CronJobs, PlacementPolicies, ClusterPlacementPolicies
// with priorities, kinds and selectors, namespace labels) is previewed
// offline by `apportion plan -f -o json`, created on a live API server,
// and explained case by case by `apportion explain -o json`; every case
// must get the same answer from both. No apportion runs on the cluster:
// explain reads what is there.
package resolve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
	"github.com/apportion-dev/apportion/test/resolvecorpus"
)

var env struct {
	c    *cluster.Cluster
	kube client.Client // knows apportion's kinds
	bin  string
	dir  string
}

func TestMain(m *testing.M) {
	flag.Parse()
	start := time.Now()
	code, err := setUp(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		code = 1
	}
	framework.StopCluster(env.c, code, 40)
	if env.dir != "" {
		_ = os.RemoveAll(env.dir)
	}
	fmt.Fprintf(os.Stderr, "resolve e2e: wall time %s\n", time.Since(start).Round(time.Second))
	os.Exit(code)
}

func setUp(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	if env.dir, err = os.MkdirTemp("", "apportion-e2e-resolve-"); err != nil {
		return 1, err
	}
	if env.bin, err = framework.BuildApportion(ctx, env.dir, os.Stderr); err != nil {
		return 1, err
	}
	if env.c, err = cluster.Start(ctx, cluster.Options{Progress: os.Stderr, LogDir: framework.LogDir("resolve")}); err != nil {
		return 1, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return 1, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return 1, err
	}
	if env.kube, err = client.New(env.c.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		return 1, err
	}
	kube := env.kube
	for _, path := range []string{
		filepath.Join(framework.RepoRoot(), "chart", "crds"),
		filepath.Join(framework.RepoRoot(), "test", "testdata", "argo"),
		"testdata",
	} {
		if err := framework.Apply(ctx, kube, path); err != nil {
			return 1, err
		}
	}
	if err := waitServed(ctx); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// waitServed waits until explain's discovery sees every kind the corpus
// uses: its first run must not find a kind missing.
func waitServed(ctx context.Context) error {
	for {
		err := run(ctx, nil, "explain", "deployment/none", "-n", "default", "-o", "json")
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = nil // not found: the command ran
		}
		if err == nil {
			mapper := env.kube.RESTMapper()
			for _, gk := range []struct{ group, kind string }{{"argoproj.io", "Rollout"}, {"argoproj.io", "Workflow"},
				{v1alpha1.GroupVersion.Group, "PlacementPolicy"}, {v1alpha1.GroupVersion.Group, "ClusterPlacementPolicy"}} {
				if _, e := mapper.RESTMapping(schema.GroupKind{Group: gk.group, Kind: gk.kind}); e != nil {
					err = e
				}
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the CRDs: %w", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// run runs the apportion binary against the cluster; stdout goes to out.
func run(ctx context.Context, out *bytes.Buffer, args ...string) error {
	cmd := exec.CommandContext(ctx, env.bin, append(args, "--kubeconfig", env.c.Kubeconfig())...)
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &errOut
	if out != nil {
		cmd.Stdout = out
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apportion %v: %w: %s", args, err, errOut.String())
	}
	return nil
}

// TestPlanAgreesWithExplain: the corpus's cases, every kind, get the same
// answer (strategy, source, why, mode and where it is set, why not placed,
// an invalid strategy's fault, every annotation problem) from plan -f
// offline and from explain on the cluster.
func TestPlanAgreesWithExplain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cases := resolvecorpus.Generate(3, resolvecorpus.Cases)
	file := filepath.Join(env.dir, "corpus.yaml")
	var buf bytes.Buffer
	if err := resolvecorpus.WriteYAML(&buf, cases); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// Offline: no cluster involved (plan takes no kubeconfig). Invalid
	// input makes it exit 2 after printing every workload's preview.
	cmd := exec.CommandContext(ctx, env.bin, "plan", "-f", file, "-o", "json")
	var planOut bytes.Buffer
	cmd.Stdout = &planOut
	_ = cmd.Run()
	var previews struct {
		Workloads []json.RawMessage `json:"workloads"`
	}
	if err := json.Unmarshal(planOut.Bytes(), &previews); err != nil || len(previews.Workloads) != len(cases) {
		t.Fatalf("plan -f: %d previews (want %d), %v", len(previews.Workloads), len(cases), err)
	}

	create(ctx, t, cases)

	type result struct {
		diff string
		err  error
	}
	results := make([]result, len(cases))
	var wg sync.WaitGroup
	work := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range work {
				c := &cases[i]
				var out bytes.Buffer
				if err := run(ctx, &out, "explain", c.ExplainKind()+"/"+c.Name, "-n", c.Namespace, "-o", "json"); err != nil {
					results[i].err = err
					continue
				}
				explained, err := resolvecorpus.Answer(out.Bytes())
				planned, perr := resolvecorpus.Answer(previews.Workloads[i])
				results[i] = result{diff: resolvecorpus.Diff(planned, explained), err: errors.Join(err, perr)}
			}
		})
	}
	for i := range cases {
		work <- i
	}
	close(work)
	wg.Wait()

	disagreements := 0
	covered := map[string]int{}
	kinds := map[string]int{}
	for i, r := range results {
		c := &cases[i]
		if r.err != nil {
			t.Fatalf("%s %s/%s: %v", c.Kind, c.Namespace, c.Name, r.err)
		}
		kinds[c.Kind]++
		planned, _ := resolvecorpus.Answer(previews.Workloads[i])
		for _, k := range resolvecorpus.Categories(planned) {
			covered[k]++
		}
		if r.diff != "" {
			disagreements++
			if disagreements <= 10 {
				t.Errorf("%s %s/%s: plan and explain disagree:\n%s", c.Kind, c.Namespace, c.Name, r.diff)
			}
		}
	}
	t.Logf("%d cases compared (%v), %d disagreements", len(cases), kinds, disagreements)
	if disagreements > 0 {
		t.Errorf("%d of %d cases disagree", disagreements, len(cases))
	}
	resolvecorpus.CheckCoverage(t, covered)
}

// create makes every case's objects, in order, and a CronJob's Job owned
// by it.
func create(ctx context.Context, t *testing.T, cases []resolvecorpus.Case) {
	t.Helper()
	kube := env.kube
	for _, c := range cases {
		for _, o := range c.Objects {
			if err := kube.Create(ctx, o); err != nil {
				t.Fatalf("creating %s %s/%s: %v", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName(), err)
			}
		}
		if c.Job != nil {
			if err := kube.Create(ctx, resolvecorpus.OwnedJob(c)); err != nil {
				t.Fatalf("creating the Job of CronJob %s/%s: %v", c.Namespace, c.Name, err)
			}
		}
	}
}
