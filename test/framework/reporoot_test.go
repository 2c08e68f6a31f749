package framework

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRepoRootFindsTheModule: RepoRoot names the folder holding the
// product's go.mod, whether found from the compiled-in path or, as under
// -trimpath, by walking up from the working directory.
func TestRepoRootFindsTheModule(t *testing.T) {
	root := RepoRoot()
	if !isRepoRoot(root) {
		t.Fatalf("RepoRoot() = %q, which holds no go.mod of %s", root, modulePath)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "apportion")); err != nil {
		t.Errorf("RepoRoot() = %q: %v", root, err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if isRepoRoot(other) {
		t.Errorf("a go.mod of another module counts as the repository")
	}
}
