package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
)

// live holds the clusters this process must stop on SIGINT or SIGTERM. It
// is the package's only global state: a signal concerns the whole process.
var live struct {
	sync.Mutex
	clusters map[*Cluster]struct{}
	quit     chan struct{} // closes the handler when no cluster is left
}

// track registers c and, for the first cluster, installs the handler.
func track(c *Cluster) {
	live.Lock()
	defer live.Unlock()
	if live.clusters == nil {
		live.clusters = map[*Cluster]struct{}{}
	}
	live.clusters[c] = struct{}{}
	if live.quit == nil {
		live.quit = make(chan struct{})
		sigs := make(chan os.Signal, 1)
		for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGTERM} {
			// An ignored signal (a launcher started with nohup or in the
			// background of a script) stays ignored.
			if !signal.Ignored(sig) {
				signal.Notify(sigs, sig)
			}
		}
		go handleSignals(sigs, live.quit)
	}
}

// untrack forgets c and, with the last cluster, gives the signals back to
// their default handling.
func untrack(c *Cluster) {
	live.Lock()
	defer live.Unlock()
	delete(live.clusters, c)
	if len(live.clusters) == 0 && live.quit != nil {
		close(live.quit)
		live.quit = nil
	}
}

// handleSignals stops every live cluster in order, then lets the signal
// take its default course, so the process still dies of it.
func handleSignals(sigs chan os.Signal, quit chan struct{}) {
	defer signal.Stop(sigs)
	var sig os.Signal
	select {
	case <-quit:
		return
	case sig = <-sigs:
	}
	live.Lock()
	var clusters []*Cluster
	for c := range live.clusters {
		clusters = append(clusters, c)
	}
	live.Unlock()
	fmt.Fprintf(os.Stderr, "cluster: %v: stopping %d local cluster(s)\n", sig, len(clusters))
	for _, c := range clusters {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		}
	}
	signal.Stop(sigs)
	_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
}

// watchdogScript removes the run folder if the launching process dies
// without saying "done" first (SIGKILL, a crash, the test binary's timeout
// panic). The components themselves get SIGKILL from the kernel then; the
// pause lets them die before their files go.
const watchdogScript = `read -r line
[ "$line" = done ] && exit 0
sleep 2
rm -rf -- "$1"`

// startWatchdog starts the watchdog shell: its standard input is a pipe
// whose only writer is this process, so it reads end-of-file when this
// process ends, however it ends.
func (c *Cluster) startWatchdog() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("creating watchdog pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("sh", "-c", watchdogScript, "apportion-cluster-watchdog", c.dir)
	cmd.Stdin = r
	// Its own process group: the terminal's Ctrl-C must not end it early.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return fmt.Errorf("starting watchdog: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reap it
	c.watchdog = w
	return nil
}
