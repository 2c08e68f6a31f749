package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildScript is where test/tools/build.sh sits relative to the module root.
const buildScript = "test/tools/build.sh"

// tools are the programs and data built by test/tools/build.sh: <dir>/bin
// holds the programs, <dir>/crds Karpenter's CRDs and <dir>/stages.yaml the
// kwok stages.
type tools struct {
	bin string
}

func (t tools) path(program string) string { return filepath.Join(t.bin, program) }
func (t tools) crdDir() string             { return filepath.Join(filepath.Dir(t.bin), "crds") }
func (t tools) kwokStages() string         { return filepath.Join(filepath.Dir(t.bin), "stages.yaml") }

// check tells which required programs or files are missing.
func (t tools) check(karpenter bool) error {
	want := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
	if karpenter {
		want = append(want, "karpenter-kwok", "kwok")
	}
	var missing []string
	for _, p := range want {
		if _, err := os.Stat(t.path(p)); err != nil {
			missing = append(missing, t.path(p))
		}
	}
	if karpenter {
		for _, p := range []string{t.crdDir(), t.kwokStages()} {
			if _, err := os.Stat(p); err != nil {
				missing = append(missing, p)
			}
		}
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return fmt.Errorf("finding nsenter (Debian package util-linux): %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing from the tools folder (run %s): %s", buildScript, strings.Join(missing, ", "))
	}
	return nil
}

// BuildTools runs test/tools/build.sh of the module that contains the
// working directory and returns the bin folder it prints. Progress goes to
// progress. It is quick when the tools are already built; the first build
// takes 10+ minutes.
func BuildTools(ctx context.Context, progress io.Writer) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, buildScript), "--quiet")
	cmd.Dir = root
	cmd.Stdout = &out
	cmd.Stderr = progress
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("running %s: %w", buildScript, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	bin := strings.TrimSpace(lines[len(lines)-1])
	if bin == "" {
		return "", fmt.Errorf("running %s: it printed no bin folder", buildScript)
	}
	return bin, nil
}

// moduleRoot walks up from the working directory to the folder that holds
// test/tools/build.sh (go test runs in the package folder).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, buildScript)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the module root: no " + buildScript + " above the working directory; set Options.BinDir")
		}
		dir = parent
	}
}
