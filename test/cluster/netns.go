package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// netns is a private network namespace with only loopback, pinned by an
// open descriptor of the launching process.
type netns struct {
	// mu keeps the descriptors open while a thread uses them: close waits
	// for dials in flight instead of letting them setns into a descriptor
	// number that a new file may have taken.
	mu     sync.RWMutex
	closed bool
	file   *os.File // the private namespace
	host   *os.File // the namespace the process started in, to return to
	fd     int      // of file
	hostFd int      // of host
	nsPath string   // /proc/<pid>/fd/<n> of file, for nsenter
	dev    uint64   // device and inode of the namespace, to recognise a
	ino    uint64   // process that has entered it
}

var errNetnsClosed = errors.New("cluster network namespace is closed")

// newNetns creates the namespace from a locked thread that then returns to
// the host namespace, so the rest of the process never leaves the host.
func newNetns() (*netns, error) {
	host, err := os.Open("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("opening host network namespace: %w", err)
	}
	n := &netns{host: host, hostFd: int(host.Fd())}
	err = onLockedThread(n.hostFd, func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unsharing network namespace (needs root or CAP_SYS_ADMIN): %w", err)
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return fmt.Errorf("opening new network namespace: %w", err)
		}
		n.file = f
		return bringLoopbackUp()
	})
	if err != nil {
		n.close()
		return nil, err
	}
	n.fd = int(n.file.Fd())
	n.nsPath = "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(n.fd)
	var st unix.Stat_t
	if err := unix.Fstat(n.fd, &st); err != nil {
		n.close()
		return nil, fmt.Errorf("reading the network namespace's inode: %w", err)
	}
	n.dev, n.ino = st.Dev, st.Ino
	return n, nil
}

// do runs fn on a thread that has entered the namespace. Sockets created by
// fn stay in the namespace after the thread has left it.
func (n *netns) do(fn func() error) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return errNetnsClosed
	}
	return onLockedThread(n.hostFd, func() error {
		if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering cluster network namespace: %w", err)
		}
		return fn()
	})
}

// dial opens a connection from inside the namespace.
func (n *netns) dial(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := n.do(func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	return conn, err
}

// listen opens a listener inside the namespace.
func (n *netns) listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := n.do(func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// path names the namespace for nsenter: the launching process's descriptor,
// reached through /proc.
func (n *netns) path() string { return n.nsPath }

// command runs name inside the namespace. nsenter enters and execs in
// place, so the pid of the returned command is the program's own.
//
// nsenter opens the namespace by path(), which names a descriptor of this
// process: it only exists while this process runs. A started command has
// therefore not really started until it has entered the namespace; see
// waitEntered.
func (n *netns) command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + n.path(), "--", name}, args...)...)
}

// enters tells whether cmd was made by command, i.e. enters the namespace
// through nsenter once started.
func (n *netns) enters(cmd *exec.Cmd) bool {
	return len(cmd.Args) >= 2 && cmd.Args[0] == "nsenter" && cmd.Args[1] == "--net="+n.path()
}

// waitEntered waits until the process pid, started from command, is inside
// the namespace (nsenter has opened path() and called setns; from then on it
// no longer needs this process), or until exited is closed or timeout
// passes. nsenter takes a few milliseconds to get there: a launcher that
// exits sooner, as a detached cluster's launcher does right after starting
// its last process, removes path() under it and nsenter fails with "cannot
// open /proc/PID/fd/N: No such file or directory".
//
// A process that has exited is no longer waited for and is no error here:
// a short command may be done before it is seen inside, and whoever waits
// for a component sees its exit status anyway.
func (n *netns) waitEntered(pid int, exited <-chan struct{}, timeout time.Duration) error {
	procPath := "/proc/" + strconv.Itoa(pid) + "/ns/net"
	deadline := time.Now().Add(timeout)
	for {
		var st unix.Stat_t
		if err := unix.Stat(procPath, &st); err == nil && st.Dev == n.dev && st.Ino == n.ino {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d has not entered the cluster network namespace after %s", pid, timeout)
		}
		select {
		case <-exited:
			return nil
		case <-time.After(time.Millisecond):
		}
	}
}

// freePorts reserves count distinct ports on 127.0.0.1 inside the
// namespace, plus the given ones, and releases them all before returning.
// The namespace is private, so nothing else can take them in between.
func (n *netns) freePorts(count int, reserved ...int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for _, p := range reserved {
		l, err := n.listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			return nil, fmt.Errorf("reserving port %d: %w", p, err)
		}
		listeners = append(listeners, l)
	}
	ports := make([]int, 0, count)
	for attempt := 0; len(ports) < count; attempt++ {
		if attempt == 1000 {
			return nil, fmt.Errorf("picking a free port: none free in %d..%d", listenPortMin, listenPortMax)
		}
		p := listenPortMin + rand.IntN(listenPortMax-listenPortMin+1)
		l, err := n.listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken
		}
		listeners = append(listeners, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// Ports handed out for listening are picked below Linux's default ephemeral
// range (32768-60999): a port bound and released to find it free could
// otherwise be taken, before the component binds it, by the source port of
// one of the many connections the control plane opens meanwhile.
const (
	listenPortMin = 20000
	listenPortMax = 32767
)

func (n *netns) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.closed = true
	if n.file != nil {
		_ = n.file.Close()
	}
	_ = n.host.Close()
}

// onLockedThread runs fn on a fresh goroutine locked to its thread and then
// puts the thread back into the host namespace. If that fails, the thread
// stays locked and dies with the goroutine instead of serving other
// goroutines from the wrong namespace.
func onLockedThread(hostFd int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := fn()
		if restoreErr := unix.Setns(hostFd, unix.CLONE_NEWNET); restoreErr != nil {
			errc <- errors.Join(err, fmt.Errorf("returning to host network namespace: %w", restoreErr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// bringLoopbackUp sets IFF_UP on lo of the calling thread's namespace, what
// `ip link set lo up` does, without needing iproute2.
func bringLoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening socket for lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("naming lo: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}
