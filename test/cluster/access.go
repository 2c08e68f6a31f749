package cluster

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kubeconfig is the path of an admin kubeconfig. It works inside the
// namespace (Command, StartProcess) and on the host through the forwarder.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RESTConfig returns an admin client configuration that dials from inside
// the namespace.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Client returns an admin controller-runtime client whose scheme knows the
// built-in kinds, CRDs, and Karpenter's and KWOK's kinds.
func (c *Cluster) Client() client.Client { return c.client }

// LogDir is the folder with one <component>.log per process.
func (c *Cluster) LogDir() string { return c.logDir }

// Dir is the run folder, removed by Stop.
func (c *Cluster) Dir() string { return c.dir }

// BinDir is the folder of the cluster's programs (kubectl, helm, ...).
func (c *Cluster) BinDir() string { return c.tools.bin }

// APIServerURL is the API server's address, the same inside the namespace
// and on the host.
func (c *Cluster) APIServerURL() string {
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.ports.apiserver))
}

// KarpenterMetricsURL is Karpenter's metrics endpoint inside the namespace
// (read it with HTTPClient). Empty without Options.Karpenter.
func (c *Cluster) KarpenterMetricsURL() string {
	if !c.opts.Karpenter {
		return ""
	}
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.ports.karpenterMetrics)) + "/metrics"
}

// HTTPClient returns a client that dials from inside the namespace and
// trusts the cluster's CA.
func (c *Cluster) HTTPClient() *http.Client { return c.httpClient(false) }

// Listen opens a listener inside the namespace, e.g. for a webhook server
// running in the test process that the API server must call.
func (c *Cluster) Listen(network, address string) (net.Listener, error) {
	return c.ns.listen(network, address)
}

// Command prepares name to run inside the namespace with KUBECONFIG set and
// the cluster's programs first on PATH; a bare name is looked up there
// first. Like the components, it gets its own process group and, unless the
// cluster is detached, SIGKILL when the thread that started it exits (Go
// keeps threads for the life of the process unless a locked goroutine ends).
// Start it yourself, or with StartProcess to have Stop stop it first.
// nsenter finds the namespace through this process's /proc entry, so this
// process must not exit before the command is inside; StartProcess returns
// only then.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	path := name
	if !strings.Contains(name, "/") {
		if _, err := os.Stat(c.tools.path(name)); err == nil {
			path = c.tools.path(name)
		}
	}
	cmd := c.ns.command(path, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig, "PATH="+c.tools.bin+":"+os.Getenv("PATH"))
	if c.opts.Detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	return cmd
}

// StartProcess starts cmd (usually from Command) with its output in
// LogDir/name.log and has Stop stop it before the cluster's own components.
// A command from Command is inside the namespace when it returns.
func (c *Cluster) StartProcess(name string, cmd *exec.Cmd) error {
	_, err := c.track(name, cmd, defaultStopGrace)
	return err
}

// IssueServingCert writes dir/tls.crt and dir/tls.key, a serving
// certificate signed by the cluster's CA, for hosts (default 127.0.0.1, ::1
// and localhost): what a webhook registered by URL with CABundle needs.
func (c *Cluster) IssueServingCert(dir string, hosts ...string) (certFile, keyFile string, err error) {
	if len(hosts) == 0 {
		hosts = loopbackHosts
	}
	kp, err := c.pki.serving(hosts[0], hosts...)
	if err != nil {
		return "", "", err
	}
	return kp.write(dir, "tls")
}

// CABundle is the PEM certificate of the cluster's CA.
func (c *Cluster) CABundle() []byte { return c.pki.certPEM }

// PIDs are the process IDs of the cluster's running processes (etcd, the
// control plane, Karpenter, kwok and those started with StartProcess), by
// name: what a benchmark reads the CPU time of.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.procs))
	for _, p := range c.procs {
		if p.cmd.Process != nil {
			out[p.name] = p.cmd.Process.Pid
		}
	}
	return out
}
