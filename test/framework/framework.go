// Package framework runs apportion on a local cluster (test/cluster): it
// builds the binary, applies manifests, starts `apportion webhook` replicas
// inside the cluster's network namespace behind a small load balancer (the
// stand-in for a Service), and registers the webhooks by URL with the
// cluster's CA. The e2e suites and `make demo` share it.
package framework

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RepoRoot is the repository's top folder.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
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
		if err := dec.Decode(&u.Object); err == io.EOF {
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
