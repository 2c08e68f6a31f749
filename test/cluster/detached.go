package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// stateFile is the name of a detached cluster's state file in its StateDir.
const stateFile = "state.json"

// state is what StopDetached needs to stop a detached cluster from another
// process: the processes in start order and the folders to remove.
type state struct {
	RunDir     string         `json:"runDir"`
	LogDir     string         `json:"logDir"`
	Kubeconfig string         `json:"kubeconfig"`
	APIServer  string         `json:"apiServer"`
	Processes  []stateProcess `json:"processes"`
}

// stateProcess identifies a process by pid and start time, so a pid reused
// by an unrelated process after a reboot or a crash is never signalled.
type stateProcess struct {
	Name      string        `json:"name"`
	PID       int           `json:"pid"`
	StartTime uint64        `json:"startTime"`
	StopGrace time.Duration `json:"stopGrace"`
}

// DefaultStateDir is where a detached cluster keeps its state when
// Options.StateDir is empty: $HOME/.cache/apportion/demo.
func DefaultStateDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding home folder for the detached state: %w", err)
	}
	return filepath.Join(home, ".cache", "apportion", "demo"), nil
}

func (c *Cluster) saveState() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.saveStateLocked()
}

func (c *Cluster) saveStateLocked() error {
	s := state{RunDir: c.dir, LogDir: c.logDir, Kubeconfig: c.kubeconfig, APIServer: c.APIServerURL()}
	for _, p := range c.procs {
		_, started, err := procStat(p.pid())
		if err != nil {
			return fmt.Errorf("reading start time of %s: %w", p.name, err)
		}
		s.Processes = append(s.Processes, stateProcess{Name: p.name, PID: p.pid(), StartTime: started, StopGrace: p.stopGrace})
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	tmp := filepath.Join(c.opts.StateDir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(c.opts.StateDir, stateFile)); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	return nil
}

func readState(dir string) (state, error) {
	var s state
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("decoding %s: %w", filepath.Join(dir, stateFile), err)
	}
	return s, nil
}

// checkNoDetached refuses to start a second detached cluster in the same
// folder, and clears the state of one whose processes are all gone.
func checkNoDetached(dir string) error {
	s, err := readState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, p := range s.Processes {
		if pidAlive(p.PID, p.StartTime) {
			return fmt.Errorf("a detached cluster already runs (state in %s, kubeconfig %s): stop it first", dir, s.Kubeconfig)
		}
	}
	return StopDetached(dir)
}

func removeState(dir string) error {
	for _, name := range []string{"kubeconfig", stateFile} {
		err := os.Remove(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", name, err)
		}
	}
	// Leave the folder if it holds anything else (e.g. a kept LogDir).
	_ = os.Remove(dir)
	return nil
}

// KubeconfigDetached returns the kubeconfig path of the detached cluster
// whose state is in dir (Options.StateDir).
func KubeconfigDetached(dir string) (string, error) {
	s, err := readState(dir)
	if err != nil {
		return "", fmt.Errorf("reading detached cluster state: %w", err)
	}
	return s.Kubeconfig, nil
}

// StopDetached stops the detached cluster whose state is in dir
// (Options.StateDir) in the same order as Stop, then removes its run folder
// and state file. With no state file there is nothing to stop and it
// returns nil.
func StopDetached(dir string) error {
	s, err := readState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for i := len(s.Processes) - 1; i >= 0; i-- {
		if err := stopPID(s.Processes[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if s.RunDir != "" {
		if err := os.RemoveAll(s.RunDir); err != nil {
			errs = append(errs, fmt.Errorf("removing run folder: %w", err))
		}
	}
	errs = append(errs, removeState(dir))
	return errors.Join(errs...)
}

// stopPID is process.stop for a process that is not our child: its
// session (and process group) has the same id as its pid.
func stopPID(p stateProcess) error {
	if !pidAlive(p.PID, p.StartTime) {
		return nil
	}
	_ = syscall.Kill(-p.PID, syscall.SIGTERM)
	if waitGone(p, p.StopGrace) {
		return nil
	}
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	if waitGone(p, 10*time.Second) {
		return fmt.Errorf("stopping %s: killed after %s without exiting on SIGTERM", p.Name, p.StopGrace)
	}
	return fmt.Errorf("stopping %s: pid %d still running after SIGKILL", p.Name, p.PID)
}

func waitGone(p stateProcess, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !pidAlive(p.PID, p.StartTime) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return !pidAlive(p.PID, p.StartTime)
}
