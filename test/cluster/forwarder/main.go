// Command forwarder serves a detached local cluster's API server on the
// host's loopback. The launcher starts it inside the cluster's network
// namespace with descriptor 3 a listening socket it opened on the host:
// a socket keeps the namespace it was created in, so this process accepts
// on the host and dials inside the namespace.
//
//	forwarder 127.0.0.1:PORT
package main

import (
	"fmt"
	"net"
	"os"

	"github.com/apportion-dev/apportion/test/cluster/internal/forward"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: forwarder TARGET (with the listener as descriptor 3)")
		os.Exit(2)
	}
	l, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "forwarder: using descriptor 3 as listener: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "forwarder: %s (host) -> %s (cluster namespace)\n", l.Addr(), os.Args[1])
	if err := forward.Serve(l, (&net.Dialer{}).DialContext, os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "forwarder: %v\n", err)
		os.Exit(1)
	}
}
