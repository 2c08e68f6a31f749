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

// ToolsSetEnv names the environment variable that picks the tools set of the
// compatibility matrix a cluster runs: empty (or "default") is the default
// set, test/tools/go.mod; NAME is test/tools/matrix/NAME/go.mod (its
// Kubernetes and Karpenter), e.g. APPORTION_TOOLS_SET=k8s1.32-karpenter1.2.
// BuildTools builds and returns that set; an explicit Options.BinDir wins.
const ToolsSetEnv = "APPORTION_TOOLS_SET"

// ToolsSet is the tools set the environment selects ("default" when none).
func ToolsSet() string {
	if s := strings.TrimSpace(os.Getenv(ToolsSetEnv)); s != "" {
		return s
	}
	return "default"
}

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
// working directory for the tools set ToolsSet names and returns the bin
// folder it prints. Progress goes to progress. It is quick when the tools
// are already built; the first build of a set takes 10+ minutes.
func BuildTools(ctx context.Context, progress io.Writer) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, buildScript), "--quiet", "--set", ToolsSet())
	cmd.Dir = root
	cmd.Stdout = &out
	cmd.Stderr = progress
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("running %s --set %s: %w", buildScript, ToolsSet(), err)
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

// ToolVersions are the versions the cluster's tools were built at, from the
// versions.env build.sh writes beside the bin folder: TOOLS_SET,
// K8S_VERSION, KARPENTER_VERSION, ETCD_VERSION, KWOK_VERSION, HELM_VERSION,
// GO_VERSION.
func (c *Cluster) ToolVersions() (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(filepath.Dir(c.tools.bin), "versions.env"))
	if err != nil {
		return nil, fmt.Errorf("reading the tools' versions: %w", err)
	}
	v := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			v[k] = val
		}
	}
	return v, nil
}
