// Package framework runs apportion on a local cluster (test/cluster): it
// builds the binary, applies manifests, starts `apportion webhook` replicas
// inside the cluster's network namespace behind a small load balancer (the
// stand-in for a Service), and registers the webhooks by URL with the
// cluster's CA. The e2e suites and `make demo` share it.
package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/workload"
)

// modulePath is the product's module, named in the go.mod RepoRoot looks for.
const modulePath = "github.com/apportion-dev/apportion"

// RepoRoot is the repository's top folder: where this source file was
// compiled from, or, when that path is not on this machine (a -trimpath
// build), the nearest folder above the working directory whose go.mod is
// the product's.
func RepoRoot() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if isRepoRoot(root) {
			return root
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for {
		if isRepoRoot(dir) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

func isRepoRoot(dir string) bool {
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(mod)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(name), `"`) == modulePath
		}
	}
	return false
}

// BuildApportion builds cmd/apportion into dir and returns the binary's path.
func BuildApportion(ctx context.Context, dir string, out io.Writer) (string, error) {
	bin := filepath.Join(dir, "apportion")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/apportion")
	build.Dir, build.Stdout, build.Stderr = RepoRoot(), out, out
	build.Env = append(os.Environ(), "GOTOOLCHAIN=auto", "CGO_ENABLED=0")
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building apportion: %w", err)
	}
	return bin, nil
}

// Apply creates every object of the YAML files at path (a file, or every
// *.yaml of a folder); objects that exist already are left as they are.
func Apply(ctx context.Context, kube client.Client, path string) error {
	files := []string{path}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.yaml"))
	}
	for _, f := range files {
		if err := applyFile(ctx, kube, f); err != nil {
			return err
		}
	}
	return nil
}

func applyFile(ctx context.Context, kube client.Client, f string) error {
	r, err := os.Open(f)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := kube.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: creating %s %s: %w", f, u.GetKind(), u.GetName(), err)
		}
	}
}

// InstallWorkflows applies the test's minimal Argo Workflow
// CustomResourceDefinition (test/testdata/argo) and waits until Workflows
// can be listed: a suite calls it before its replicas start, so that they
// watch Workflows from the first admission.
func InstallWorkflows(ctx context.Context, kube client.Client) error {
	if err := Apply(ctx, kube, filepath.Join(RepoRoot(), "test", "testdata", "argo")); err != nil {
		return err
	}
	for {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(workload.WorkflowGVK.GroupVersion().WithKind("WorkflowList"))
		err := kube.List(ctx, list)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the Workflow CRD: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
