package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// KubectlApportion runs `kubectl apportion ARGS` as a user would: the
// suite's apportion binary under the plugin's name, kubectl-apportion, in a
// folder put first on kubectl's PATH, with the cluster's kubeconfig. It
// returns the standard output and fails the test when the command fails.
func (s *Suite) KubectlApportion(t testing.TB, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(s.Bin, filepath.Join(dir, "kubectl-apportion")); err != nil {
		t.Fatal(err)
	}
	cmd := s.C.Command("kubectl", append([]string{"apportion"}, args...)...)
	path := dir
	for _, kv := range cmd.Env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = dir + ":" + p // the last PATH= is the one the command gets
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl apportion %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
