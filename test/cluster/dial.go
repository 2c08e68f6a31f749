package cluster

import (
	"context"
	"net"
)

// Dial opens a connection from inside the namespace, e.g. from a proxy in
// the test process to a webhook replica started with Command.
func (c *Cluster) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	return c.ns.dial(ctx, network, address)
}

// FreePorts returns count distinct ports that are free on 127.0.0.1 inside
// the namespace, for processes a test starts there.
func (c *Cluster) FreePorts(count int) ([]int, error) {
	return c.ns.freePorts(count)
}
