package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

// The agent is the demo's long-lived process. `up` starts it detached (its
// own session, output in the cluster's log folder as demo-agent.log) and
// exits; the agent starts the detached cluster, then serves what a real
// cluster would have and test/cluster has not:
//
//   - an OCI registry (framework.Registry) on 127.0.0.1:PORT inside the
//     cluster's network namespace, and the same port on the host's
//     loopback forwarded to it, so `make release-push` and `helm install`
//     from the user's shell and the pods inside reach it at one address;
//   - a kubelet (framework.Kubelet) that runs the chart's pods as processes
//     of the binary inside the image they name, pulled from that registry.
//
// It writes agentInfo to agentFile once all of that serves, and on SIGTERM
// (make demo-down) stops the pods' processes and exits; the cluster itself
// is stopped by cluster.StopDetached.

// agentInfo is what the agent tells `up` once it is ready.
type agentInfo struct {
	Registry   string `json:"registry"` // host:port, the same on the host and in the cluster
	Kubeconfig string `json:"kubeconfig"`
	LogDir     string `json:"logDir"`
	BinDir     string `json:"binDir"`
	Error      string `json:"error,omitempty"` // set instead when the start failed
}

// agentPID identifies the agent process for `down`: pid and start time, so
// that a pid reused by another process is never signalled.
type agentPID struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
}

func (l layout) agentFile() string    { return filepath.Join(l.own, "agent.json") }
func (l layout) agentPIDFile() string { return filepath.Join(l.own, "agent.pid.json") }
func (l layout) logDir() string       { return filepath.Join(l.own, "logs") }
func (l layout) agentLog() string     { return filepath.Join(l.logDir(), "demo-agent.log") }
func (l layout) releaseDir() string   { return filepath.Join(l.own, "release") }
func (l layout) podsDir() string      { return filepath.Join(l.own, "pods") }

// releasedBinary is the host platform's binary that `make release` wrote.
func (l layout) releasedBinary() string {
	return filepath.Join(l.releaseDir(), fmt.Sprintf("apportion_%s_linux_%s", strings.TrimPrefix(demoVersion, "v"), runtime.GOARCH))
}

// agent is `demo agent BINDIR`: it runs until SIGTERM or SIGINT.
func agent(l layout, binDir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	c, err := cluster.Start(ctx, cluster.Options{
		BinDir: binDir, Karpenter: true, Detached: true, StateDir: l.state, LogDir: l.logDir(), Progress: os.Stderr,
	})
	if err != nil {
		return writeAgentInfo(l, agentInfo{Error: "starting the cluster: " + err.Error()})
	}
	reg, hostL, err := startRegistry(c)
	if err != nil {
		return writeAgentInfo(l, agentInfo{Error: err.Error()})
	}
	defer reg.Close()
	fmt.Fprintf(os.Stderr, "agent: registry %s (host loopback and cluster namespace)\n", reg.Host)

	kubelet := framework.NewKubelet(c, l.releasedBinary(), l.podsDir())
	kubelet.PullFrom(reg)
	kctx, stopKubelet := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { kubelet.Run(kctx); close(done) }()

	err = writeAgentInfo(l, agentInfo{Registry: reg.Host, Kubeconfig: c.Kubeconfig(), LogDir: c.LogDir(), BinDir: c.BinDir()})
	if err == nil {
		fmt.Fprintln(os.Stderr, "agent: ready; SIGTERM (make demo-down) stops it")
		<-ctx.Done()
	}
	fmt.Fprintln(os.Stderr, "agent: stopping the pods' processes")
	_ = hostL.Close()
	stopKubelet()
	<-done
	fmt.Fprintln(os.Stderr, "agent: stopped")
	return err
}

func writeAgentInfo(l layout, info agentInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp := l.agentFile() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.agentFile()); err != nil {
		return err
	}
	if info.Error != "" {
		return errors.New(info.Error)
	}
	return nil
}

// startRegistry starts a registry inside the cluster's namespace on a port
// that is also free on the host's loopback, and forwards that host port to
// it. The registry picks its port; a port taken on the host means another
// try.
func startRegistry(c *cluster.Cluster) (*framework.Registry, net.Listener, error) {
	var lastErr error
	for range 10 {
		reg, err := framework.StartRegistry(c)
		if err != nil {
			return nil, nil, fmt.Errorf("starting the registry: %w", err)
		}
		hostL, err := net.Listen("tcp", reg.Host)
		if err != nil {
			reg.Close()
			lastErr = err
			continue
		}
		go forward(hostL, c, reg.Host)
		return reg, hostL, nil
	}
	return nil, nil, fmt.Errorf("no port free both in the cluster and on the host for the registry: %w", lastErr)
}

// forward copies each connection accepted on l (the host) to target, dialled
// inside the cluster's namespace, until l is closed.
func forward(l net.Listener, c *cluster.Cluster, target string) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = in.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			out, err := c.Dial(ctx, "tcp", target)
			cancel()
			if err != nil {
				fmt.Fprintf(os.Stderr, "agent: forwarding to %s: %v\n", target, err)
				return
			}
			defer func() { _ = out.Close() }()
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); pipe(out, in) }()
			go func() { defer wg.Done(); pipe(in, out) }()
			wg.Wait()
		}()
	}
}

// pipe copies src to dst, then half-closes dst so the other side sees the
// end of the stream.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// startAgent starts `demo agent` detached from a copy of this program (go
// run removes its own binary when it exits), records its pid and waits
// until it is ready or has failed.
func startAgent(ctx context.Context, l layout, binDir string, timeout time.Duration) (agentInfo, error) {
	self, err := os.Executable()
	if err != nil {
		return agentInfo{}, err
	}
	bin := filepath.Join(l.bin(), "demo")
	if err := copyFile(self, bin); err != nil {
		return agentInfo{}, fmt.Errorf("copying the demo program: %w", err)
	}
	if err := os.MkdirAll(l.logDir(), 0o755); err != nil {
		return agentInfo{}, err
	}
	logf, err := os.OpenFile(l.agentLog(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return agentInfo{}, err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(bin, "agent", binDir)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The cluster builds its forwarder from the module, found from the
	// working directory.
	cmd.Dir = framework.RepoRoot()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return agentInfo{}, fmt.Errorf("starting the demo agent: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	started, err := startTime(cmd.Process.Pid)
	if err == nil {
		err = writeJSON(l.agentPIDFile(), agentPID{PID: cmd.Process.Pid, StartTime: started})
	}
	if err != nil {
		_ = cmd.Process.Kill()
		return agentInfo{}, fmt.Errorf("recording the demo agent's pid: %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		b, err := os.ReadFile(l.agentFile())
		if err == nil {
			var info agentInfo
			if err := json.Unmarshal(b, &info); err != nil {
				return info, fmt.Errorf("reading %s: %w", l.agentFile(), err)
			}
			if info.Error != "" {
				return info, fmt.Errorf("demo agent: %s", info.Error)
			}
			return info, nil
		}
		select {
		case err := <-exited:
			return agentInfo{}, fmt.Errorf("the demo agent exited before it was ready: %w", err)
		case <-waitCtx.Done():
			return agentInfo{}, fmt.Errorf("the demo agent is not ready after %s", timeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopAgent stops the agent recorded in l, if it still runs: SIGTERM, which
// has it stop the pods' processes, then SIGKILL after a minute.
func stopAgent(l layout) error {
	b, err := os.ReadFile(l.agentPIDFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var p agentPID
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("reading %s: %w", l.agentPIDFile(), err)
	}
	if !alive(p) {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	if waitExit(p, time.Minute) {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	if waitExit(p, 10*time.Second) {
		return fmt.Errorf("the demo agent (pid %d) did not exit within a minute of SIGTERM: killed; its pods' processes may be left", p.PID)
	}
	return fmt.Errorf("the demo agent (pid %d) still runs after SIGKILL", p.PID)
}

func waitExit(p agentPID, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !alive(p) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return !alive(p)
}

// alive reports whether p still runs (a zombie counts as gone).
func alive(p agentPID) bool {
	st, err := startTime(p.PID)
	return err == nil && st == p.StartTime
}

// startTime reads a process's start time (clock ticks after boot, field 22
// of /proc/PID/stat); a zombie is reported as not found.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, fs.ErrNotExist
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// stopLeftPods stops the pods' processes that an agent which did not exit
// cleanly (killed, crashed) left behind: the processes whose program is a
// binary the demo's kubelet pulled into its pods folder, and no other.
func stopLeftPods(l layout) error {
	prefix := l.podsDir() + string(filepath.Separator)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var left []agentPID
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || !strings.HasPrefix(exe, prefix) {
			continue
		}
		if st, err := startTime(pid); err == nil {
			left = append(left, agentPID{PID: pid, StartTime: st})
		}
	}
	var errs []error
	for _, p := range left {
		say(fmt.Sprintf("stopping pid %d, a pod's process the demo agent left", p.PID))
		_ = syscall.Kill(p.PID, syscall.SIGTERM)
	}
	for _, p := range left {
		if waitExit(p, 30*time.Second) {
			continue
		}
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
		if !waitExit(p, 10*time.Second) {
			errs = append(errs, fmt.Errorf("pid %d, a pod's process, still runs after SIGKILL", p.PID))
		}
	}
	return errors.Join(errs...)
}
