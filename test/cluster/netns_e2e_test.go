//go:build e2e

package cluster

import (
	"io"
	"net"
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/test/cluster/internal/forward"
)

// TestNetnsIsolatesAndForwards checks the namespace has loopback only, that
// a listener opened through it is unreachable from the host, reachable by a
// process started inside it and, through the forwarder, from the host.
func TestNetnsIsolatesAndForwards(t *testing.T) {
	n, err := newNetns()
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()

	l, err := n.listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(conn, "hello from the namespace\n")
			_ = conn.Close()
		}
	}()
	addr := l.Addr().String()

	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Errorf("dialing %s from the host succeeded; the listener should be inside the namespace only", addr)
	}
	conn, err := n.dial(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("dialing from inside: %v", err)
	}
	got, _ := io.ReadAll(conn)
	conn.Close()
	if string(got) != "hello from the namespace\n" {
		t.Errorf("read %q through the namespace dialer", got)
	}

	out, err := n.command("cat", "/proc/net/dev").CombinedOutput()
	if err != nil {
		t.Fatalf("running a command inside: %v: %s", err, out)
	}
	var ifaces []string
	for _, line := range strings.Split(string(out), "\n")[2:] {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			ifaces = append(ifaces, name)
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Errorf("interfaces inside the namespace %v, want only lo", ifaces)
	}

	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = forward.Serve(host, n.dial, addr) }()
	defer host.Close()
	conn, err = net.Dial("tcp", host.Addr().String())
	if err != nil {
		t.Fatalf("dialing the forwarder: %v", err)
	}
	got, _ = io.ReadAll(conn)
	conn.Close()
	if string(got) != "hello from the namespace\n" {
		t.Errorf("read %q through the forwarder", got)
	}
}
