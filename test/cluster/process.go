package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Grace periods between SIGTERM and SIGKILL. The API server drains its
// requests and watches before it exits, which takes a few seconds.
const (
	defaultStopGrace   = 10 * time.Second
	apiserverStopGrace = 30 * time.Second
)

// process is one running component: its command, its log file and a
// channel closed when it has exited.
type process struct {
	name      string
	cmd       *exec.Cmd
	logPath   string
	stopGrace time.Duration
	done      chan struct{}
	err       error // exit status, valid once done is closed
}

// start runs cmd with stdout and stderr appended to logDir/name.log.
// Detached processes get their own session, so the terminal's Ctrl-C never
// reaches them and they survive their parent; attached ones get their own
// process group (killed as a whole on stop) and SIGKILL from the kernel if
// the launching process dies first.
func start(name string, cmd *exec.Cmd, logDir string, detached bool, stopGrace time.Duration) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	defer logFile.Close() // the child has its own copy
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if detached {
		cmd.SysProcAttr.Setsid = true
	} else {
		cmd.SysProcAttr.Setpgid = true
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, stopGrace: stopGrace, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, waits up to the grace period,
// then sends SIGKILL to the group and waits for the exit.
func (p *process) stop() error {
	if p.exited() {
		return nil
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(p.stopGrace):
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	select {
	case <-p.done:
		return fmt.Errorf("stopping %s: killed after %s without exiting on SIGTERM", p.name, p.stopGrace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stopping %s: pid %d still running after SIGKILL", p.name, p.pid())
	}
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 2*n+100 {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, s.Err()
}

// dumpLog writes a header and the last n lines of a log.
func dumpLog(w io.Writer, name, path string, n int) {
	lines, err := tailFile(path, n)
	fmt.Fprintf(w, "==> %s: last %d lines of %s <==\n", name, n, path)
	if err != nil {
		fmt.Fprintf(w, "(cannot read: %v)\n", err)
		return
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// pidAlive tells whether pid runs and is still the process that started at
// startTime (clock ticks since boot, /proc/PID/stat field 22), so a recycled
// pid is never signalled. Zombies count as gone.
func pidAlive(pid int, startTime uint64) bool {
	state, started, err := procStat(pid)
	if err != nil {
		return false
	}
	return state != "Z" && state != "X" && started == startTime
}

// procStat reads the state and the start time of a process.
func procStat(pid int) (state string, startTime uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, err
	}
	// The command name in parentheses may hold spaces: parse after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, errors.New("parsing /proc stat: no command name")
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return "", 0, errors.New("parsing /proc stat: too few fields")
	}
	startTime, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("parsing /proc stat start time: %w", err)
	}
	return fields[0], startTime, nil
}
