package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options say what to start and where. The zero value starts the control
// plane only, with the tools built by test/tools/build.sh.
type Options struct {
	// BinDir holds the programs (the folder test/tools/build.sh prints; its
	// parent holds crds/ and stages.yaml). Empty: run build.sh and use its
	// output.
	BinDir string
	// LogDir receives one <component>.log per process and is kept. Empty: a
	// logs folder inside the run folder, removed by Stop.
	LogDir string
	// Karpenter also installs Karpenter's CRDs and starts Karpenter's kwok
	// provider and the kwok controller, which turns the nodes Karpenter
	// creates into Ready nodes and their pods into Running ones, with IPs
	// from PodCIDR, except pods labelled ProcessPodLabel.
	Karpenter bool
	// APIServerFlags are appended to the kube-apiserver command line; a flag
	// given here overrides the launcher's own.
	APIServerFlags []string
	// ControllerManagerFlags and SchedulerFlags are appended to the
	// kube-controller-manager and kube-scheduler command lines, e.g. a
	// higher --kube-api-qps for a burst of thousands of pods.
	ControllerManagerFlags []string
	SchedulerFlags         []string
	// KarpenterEnv are extra NAME=value settings for Karpenter, e.g.
	// FEATURE_GATES or INSTANCE_TYPES_FILE_PATH; they override the launcher's.
	KarpenterEnv []string
	// WaitTimeout bounds each health wait. Default 2 minutes.
	WaitTimeout time.Duration
	// Progress receives one line per start-up step and, when Start fails,
	// the tail of every log. Default os.Stderr.
	Progress io.Writer
	// Detached leaves the cluster running after the launching process exits
	// (see StopDetached). Its folders go into StateDir.
	Detached bool
	// StateDir holds a detached cluster's state file, run folder and logs.
	// Default $HOME/.cache/apportion/demo.
	StateDir string
}

// Cluster is a running local cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	opts       Options
	tools      tools
	dir        string // run folder: certificates, kubeconfig, data; removed by Stop
	logDir     string
	ns         *netns
	pki        *authority
	admin      keyPair
	ports      ports
	kubeconfig string
	restConfig *rest.Config
	client     client.Client
	started    time.Time

	mu           sync.Mutex
	procs        []*process // in start order
	hostListener net.Listener
	watchdog     io.WriteCloser
	stopped      bool

	stopOnce sync.Once
	stopErr  error
}

// ports are the cluster's ports on 127.0.0.1 inside the namespace. The API
// server's is also free on the host, for the forwarder.
type ports struct {
	apiserver, etcd, etcdPeer, controllerManager, scheduler int
	karpenterMetrics, karpenterHealth, kwok                 int
}

// step is one stage of Start, reported with its duration.
type step struct {
	what string
	run  func(context.Context) error
}

// Start launches a cluster and waits until every component is healthy. On
// failure it prints the tail of each log to Options.Progress, stops what it
// had started and returns the error. ctx bounds the start-up only.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	opts, err = withDefaults(ctx, opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, tools: tools{bin: opts.BinDir}, started: time.Now()}
	if err := c.tools.check(opts.Karpenter); err != nil {
		return nil, err
	}
	if opts.Detached {
		if err := checkNoDetached(opts.StateDir); err != nil {
			return nil, err
		}
	}
	track(c)
	defer func() {
		if err != nil {
			fmt.Fprintf(opts.Progress, "cluster: start failed: %v\n", err)
			c.DumpLogs(opts.Progress, 30)
			_ = c.Stop()
		}
	}()
	steps := []step{
		{"preparing run folder", c.prepare},
		{"starting etcd", c.startEtcd},
		{"starting kube-apiserver", c.startAPIServer},
		{"starting kube-controller-manager", c.startControllerManager},
		{"starting kube-scheduler", c.startScheduler},
		{"waiting for the default ServiceAccount", c.waitDefaultServiceAccount},
	}
	if opts.Karpenter {
		steps = append(steps,
			step{"installing Karpenter CRDs", c.installCRDs},
			step{"starting Karpenter (kwok provider)", c.startKarpenter},
			step{"starting kwok", c.startKwok},
		)
	}
	steps = append(steps, step{"forwarding the API server to the host", c.startForwarder})
	for _, s := range steps {
		t0 := time.Now()
		if err := s.run(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(opts.Progress, "cluster: %s: done in %s\n", s.what, time.Since(t0).Round(10*time.Millisecond))
	}
	if opts.Detached {
		if err := c.saveState(); err != nil {
			return nil, err
		}
		// From here on the cluster belongs to StopDetached: Ctrl-C in the
		// launcher must not take it down.
		untrack(c)
	}
	fmt.Fprintf(opts.Progress, "cluster: ready in %s; kubeconfig %s; logs in %s\n",
		time.Since(c.started).Round(10*time.Millisecond), c.kubeconfig, c.logDir)
	return c, nil
}

func withDefaults(ctx context.Context, opts Options) (Options, error) {
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = 2 * time.Minute
	}
	if opts.Detached && opts.StateDir == "" {
		dir, err := DefaultStateDir()
		if err != nil {
			return opts, err
		}
		opts.StateDir = dir
	}
	if opts.BinDir == "" {
		bin, err := BuildTools(ctx, opts.Progress)
		if err != nil {
			return opts, err
		}
		opts.BinDir = bin
	}
	return opts, nil
}

// prepare makes the run folder, the namespace, the ports, the certificates,
// the kubeconfig and the client.
func (c *Cluster) prepare(context.Context) error {
	parent := os.TempDir()
	if c.opts.Detached {
		parent = c.opts.StateDir
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("creating state folder: %w", err)
		}
	}
	dir, err := os.MkdirTemp(parent, "apportion-cluster-")
	if err != nil {
		return fmt.Errorf("creating run folder: %w", err)
	}
	c.mu.Lock()
	c.dir = dir
	c.mu.Unlock()
	if !c.opts.Detached {
		if err := c.startWatchdog(); err != nil {
			return err
		}
	}
	c.logDir = c.opts.LogDir
	if c.logDir == "" {
		c.logDir = filepath.Join(dir, "logs")
	}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return fmt.Errorf("creating log folder: %w", err)
	}
	if c.ns, err = newNetns(); err != nil {
		return err
	}
	if err := c.pickPorts(); err != nil {
		return err
	}
	if err := c.writePKI(); err != nil {
		return err
	}
	return c.writeKubeconfig()
}

// pickPorts takes the API server port from a listener on the host, kept for
// the forwarder, so that one kubeconfig works inside and outside the
// namespace; the other ports only need to be free inside.
func (c *Cluster) pickPorts() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening on host loopback: %w", err)
	}
	c.mu.Lock()
	c.hostListener = l
	c.mu.Unlock()
	api := l.Addr().(*net.TCPAddr).Port
	p, err := c.ns.freePorts(7, api)
	if err != nil {
		return err
	}
	c.ports = ports{
		apiserver: api, etcd: p[0], etcdPeer: p[1], controllerManager: p[2], scheduler: p[3],
		karpenterMetrics: p[4], karpenterHealth: p[5], kwok: p[6],
	}
	return nil
}

// launch starts a program from the tools folder inside the namespace, with
// a small environment of its own (HOME in the run folder, so nothing is
// written to the user's home) and its output in the log folder.
func (c *Cluster) launch(name string, stopGrace time.Duration, env []string, program string, args ...string) (*process, error) {
	home := filepath.Join(c.dir, "home", name)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, fmt.Errorf("creating home of %s: %w", name, err)
	}
	cmd := c.ns.command(c.tools.path(program), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, env...)
	cmd.Dir = home
	return c.track(name, cmd, stopGrace)
}

// enterTimeout bounds the wait for a started process to enter the
// namespace; it takes milliseconds.
const enterTimeout = 30 * time.Second

// track starts cmd and records it for Stop (and for the state file of a
// detached cluster). A command that enters the namespace through nsenter
// counts as started once it is inside: until then it depends on a /proc
// path that disappears with this process (see netns.waitEntered).
func (c *Cluster) track(name string, cmd *exec.Cmd, stopGrace time.Duration) (*process, error) {
	p, err := c.startTracked(name, cmd, stopGrace)
	if err != nil || !c.ns.enters(cmd) {
		return p, err
	}
	if err := c.ns.waitEntered(p.pid(), p.done, enterTimeout); err != nil {
		return p, fmt.Errorf("starting %s: %w; %s", name, err, c.logHint(p))
	}
	return p, nil
}

func (c *Cluster) startTracked(name string, cmd *exec.Cmd, stopGrace time.Duration) (*process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, errors.New("cluster is stopped")
	}
	p, err := start(name, cmd, c.logDir, c.opts.Detached, stopGrace)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	if c.opts.Detached {
		// Saved after every start, so StopDetached can clean up even if the
		// launcher dies half-way.
		if err := c.saveStateLocked(); err != nil {
			return p, err
		}
	}
	return p, nil
}

// process returns the started process called name, or nil.
func (c *Cluster) process(name string) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// Stop stops every process in the reverse order of their start (extra
// processes, controllers, API server, then etcd), removes the run folder
// and, for a detached cluster, its state file. It is idempotent.
// Callers that come while a stop is under way wait for it to finish.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	c.mu.Lock()
	c.stopped = true // track refuses new processes from now on
	procs := c.procs
	c.mu.Unlock()
	defer untrack(c)

	var errs []error
	t0 := time.Now()
	var took []string
	for i := len(procs) - 1; i >= 0; i-- {
		t := time.Now()
		if err := procs[i].stop(); err != nil {
			errs = append(errs, err)
		}
		took = append(took, fmt.Sprintf("%s %s", procs[i].name, time.Since(t).Round(10*time.Millisecond)))
	}
	if len(procs) > 0 {
		fmt.Fprintf(c.opts.Progress, "cluster: stopped in %s (%s)\n", time.Since(t0).Round(10*time.Millisecond), strings.Join(took, ", "))
	}
	if c.hostListener != nil {
		_ = c.hostListener.Close()
	}
	if c.ns != nil {
		c.ns.close()
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("removing run folder: %w", err))
		}
	}
	if c.opts.Detached {
		errs = append(errs, removeState(c.opts.StateDir))
	}
	if c.watchdog != nil {
		// Everything is clean: tell the watchdog to leave without acting.
		_, _ = io.WriteString(c.watchdog, "done\n")
		_ = c.watchdog.Close()
	}
	return errors.Join(errs...)
}

// DumpLogs writes the last lines of every component's log, in start order.
func (c *Cluster) DumpLogs(w io.Writer, lines int) {
	c.mu.Lock()
	procs := c.procs
	c.mu.Unlock()
	for _, p := range procs {
		dumpLog(w, p.name, p.logPath, lines)
	}
}
