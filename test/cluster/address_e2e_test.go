//go:build e2e

package cluster

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestAddLoopbackAddress puts a pod-like IP on lo inside the namespace and
// checks that a listener there is reachable from inside the namespace and
// not from the host, and that adding the address again is fine.
func TestAddLoopbackAddress(t *testing.T) {
	n, err := newNetns()
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	c := &Cluster{ns: n} // all AddLoopbackAddress, Listen and Dial need

	const ip = "10.244.255.1"
	if l, err := c.Listen("tcp", net.JoinHostPort(ip, "0")); err == nil {
		l.Close()
		t.Fatalf("listening on %s before adding it succeeded", ip)
	}
	for i := range 2 { // the second time finds it there already
		if err := c.AddLoopbackAddress(ip); err != nil {
			t.Fatalf("AddLoopbackAddress(%s), call %d: %v", ip, i+1, err)
		}
	}
	for _, bad := range []string{"", "10.244.0", "0.0.0.0", "fe80::1%lo"} {
		if err := c.AddLoopbackAddress(bad); err == nil {
			t.Errorf("AddLoopbackAddress(%q) succeeded", bad)
		}
	}
	var loAddrs []string
	if err := n.do(func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		addrs, err := lo.Addrs()
		for _, a := range addrs {
			loAddrs = append(loAddrs, a.String())
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("addresses of lo in the namespace: %v", loAddrs)
	if !strings.Contains(" "+strings.Join(loAddrs, " ")+" ", " "+ip+"/32 ") {
		t.Errorf("lo in the namespace has %v, want %s/32 among them", loAddrs, ip)
	}

	addr := serveHello(t, c, net.JoinHostPort(ip, "0"))
	if got := readHello(t, c, addr); got != "hello\n" {
		t.Errorf("read %q from %s inside the namespace", got, addr)
	}
	// From a process started inside the namespace too, as the API server.
	if out, err := n.command("bash", "-c", "exec 3<>/dev/tcp/${0%:*}/${0##*:} && cat <&3", addr).CombinedOutput(); err != nil || string(out) != "hello\n" {
		t.Errorf("reading %s from a process in the namespace: %v: %q", addr, err, out)
	}
	if conn, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		conn.Close()
		t.Errorf("dialing %s from the host succeeded; the address should exist inside the namespace only", addr)
	} else {
		t.Logf("dialing %s from the host: %v (as it should)", addr, err)
	}
	hostAddrs, _ := net.InterfaceAddrs()
	for _, a := range hostAddrs {
		if strings.HasPrefix(a.String(), ip+"/") {
			t.Errorf("the host has %s too", a)
		}
	}

	t.Run("IPv6", func(t *testing.T) {
		// The machines this runs on have IPv6 on lo; if one does not, the
		// IPv6 path of AddLoopbackAddress is untested there: say so by failing.
		l, err := c.Listen("tcp6", "[::1]:0")
		if err != nil {
			t.Fatalf("no IPv6 on lo in the namespace, so AddLoopbackAddress's IPv6 path cannot be checked: %v", err)
		}
		l.Close()
		const ip6 = "fd00:10:244::1"
		if err := c.AddLoopbackAddress(ip6); err != nil {
			t.Fatal(err)
		}
		addr := serveHello(t, c, net.JoinHostPort(ip6, "0"))
		if got := readHello(t, c, addr); got != "hello\n" {
			t.Errorf("read %q from %s inside the namespace", got, addr)
		}
	})
}

// serveHello listens on address inside the namespace and says hello to
// every connection until the test ends. It returns the address it got.
func serveHello(t *testing.T, c *Cluster, address string) string {
	t.Helper()
	l, err := c.Listen("tcp", address)
	if err != nil {
		t.Fatalf("listening on %s inside the namespace: %v", address, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(conn, "hello\n")
			_ = conn.Close()
		}
	}()
	return l.Addr().String()
}

func readHello(t *testing.T, c *Cluster, addr string) string {
	t.Helper()
	conn, err := c.Dial(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("dialing %s from inside the namespace: %v", addr, err)
	}
	defer conn.Close()
	got, _ := io.ReadAll(conn)
	return string(got)
}
