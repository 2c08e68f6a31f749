package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/apportion-dev/apportion/test/cluster/internal/forward"
)

const forwarderPackage = "github.com/apportion-dev/apportion/test/cluster/forwarder"

// startForwarder serves the API server on the host's 127.0.0.1 at the same
// port, so Kubeconfig works there too, and waits until the API server
// answers there. An attached cluster forwards from a goroutine; a detached
// one needs a process that outlives the launcher.
func (c *Cluster) startForwarder(ctx context.Context) error {
	target := net.JoinHostPort("127.0.0.1", fmt.Sprint(c.ports.apiserver))
	if !c.opts.Detached {
		go func() { _ = forward.Serve(c.hostListener, c.ns.dial, target) }()
		return c.waitForwarded(ctx, nil)
	}
	bin, err := c.buildForwarder(ctx)
	if err != nil {
		return err
	}
	f, err := c.hostListener.(*net.TCPListener).File()
	if err != nil {
		return fmt.Errorf("passing the host listener: %w", err)
	}
	defer f.Close()
	cmd := c.ns.command(bin, target)
	cmd.ExtraFiles = []*os.File{f} // descriptor 3 in the forwarder
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	// track returns once the forwarder is inside the namespace: the
	// launcher may exit right after Start.
	p, err := c.track("forwarder", cmd, defaultStopGrace)
	if err != nil {
		return err
	}
	// The forwarder owns the socket now.
	_ = c.hostListener.Close()
	return c.waitForwarded(ctx, p)
}

// waitForwarded waits until the API server answers on the host's port, the
// way kubectl on the host reaches it; p is the forwarder process, if any.
func (c *Cluster) waitForwarded(ctx context.Context, p *process) error {
	url := c.APIServerURL() + "/readyz"
	return c.waitHTTPWith(ctx, c.hostHTTPClient(true), "the API server on the host at "+url, p, url)
}

// buildForwarder compiles the forwarder command into the run folder. It is
// small (standard library only) and takes a second or two when GOCACHE is
// warm; only the detached mode needs it.
func (c *Cluster) buildForwarder(ctx context.Context) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(c.dir, "bin", "forwarder")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, forwarderPackage)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if t := os.Getenv("GOTOOLCHAIN"); t == "" || t == "local" {
		// go.mod asks for a newer go than the machine's default.
		cmd.Env = append(cmd.Env, "GOTOOLCHAIN=auto")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w: %s", forwarderPackage, err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}
