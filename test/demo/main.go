// Command demo is `make demo` and `make demo-down`: it starts a local
// cluster with Karpenter (test/cluster, detached so that it outlives this
// process), installs apportion into it as the README tells users to (make
// release, make release-push to an OCI registry, helm install from there),
// deploys the examples and prints how their pods were split.
//
//	go run ./test/demo up       start (or restart) the demo and print the table
//	go run ./test/demo status   print the table again (after kubectl scale, say)
//	go run ./test/demo down     stop it and remove everything it left
//	demo agent BINDIR           the long-lived process `up` starts (see agent.go)
//
// Everything the demo keeps lives in cluster.DefaultStateDir()
// ($HOME/.cache/apportion/demo): the cluster's state, run folder and
// kubeconfig, and the demo's own files: the release, the logs (the cluster's
// and the agent's), the pods' folders.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/apportion-dev/apportion/test/cluster"
)

const usage = "usage: go run ./test/demo up|status|down"

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "agent" && len(os.Args) != 2) || (os.Args[1] == "agent" && len(os.Args) != 3) {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	l, err := demoLayout()
	if err == nil {
		switch os.Args[1] {
		case "up":
			err = up(l)
		case "status":
			err = status(l)
		case "down":
			err = down(l)
		case "agent":
			err = agent(l, os.Args[2])
		case "-h", "--help", "help":
			fmt.Println(usage)
			return
		default:
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// layout says where the demo keeps things: the cluster's state folder and,
// inside it, one sub-folder for the demo's own files, so that `down` can
// remove them in one step after cluster.StopDetached has removed the
// cluster's.
type layout struct {
	state string // the cluster's StateDir
	own   string // the demo's files
}

func demoLayout() (layout, error) {
	dir, err := cluster.DefaultStateDir()
	if err != nil {
		return layout{}, err
	}
	return layout{state: dir, own: filepath.Join(dir, "apportion")}, nil
}

func (l layout) bin() string  { return filepath.Join(l.own, "bin") }
func (l layout) helm() string { return filepath.Join(l.own, "helm") }
