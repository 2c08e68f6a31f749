// Package helmbin finds the helm CLI the tests render the chart with: the
// version test/tools/helm pins, the one the test cluster uses.
package helmbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

var (
	path = sync.OnceValues(find)
	// built is the temporary directory of a helm built by find; Cleanup
	// removes it.
	built string
)

// Path is $HELM when set; else the helm test/tools/build.sh built, when it
// is there; else one built now from test/tools/helm with the go command
// (with build.sh's flags, so the packages it compiled are reused; the first
// time takes a minute or two).
func Path() (string, error) { return path() }

// Cleanup removes a helm Path built; call it from TestMain after m.Run.
func Cleanup() {
	if built != "" {
		_ = os.RemoveAll(built)
	}
}

func find() (string, error) {
	if h := os.Getenv("HELM"); h != "" {
		return h, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the repository")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := exec.Command("bash", filepath.Join(root, "test", "tools", "build.sh"), "--print-dir").Output(); err == nil {
		if h := filepath.Join(strings.TrimSpace(string(out)), "helm"); isExecutable(h) {
			return h, nil
		}
	}
	dir, err := os.MkdirTemp("", "apportion-helm-")
	if err != nil {
		return "", err
	}
	built = dir
	h := filepath.Join(dir, "helm")
	build := exec.Command("go", "build", "-mod=readonly", "-buildvcs=false", "-trimpath",
		"-tags", "selinux,notest,grpcnotrace", "-ldflags", "-s -w", "-o", h, "helm.sh/helm/v3/cmd/helm")
	build.Dir = filepath.Join(root, "test", "tools", "helm")
	build.Env = append(os.Environ(), "GOTOOLCHAIN=auto", "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building helm from test/tools/helm: %w\n%s", err, out)
	}
	return h, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
