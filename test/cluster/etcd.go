package cluster

import (
	"context"
	"fmt"
	"path/filepath"
)

func (c *Cluster) etcdURL() string { return fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcd) }

// startEtcd runs a single-member etcd on plain HTTP: only the API server in
// the same private namespace talks to it.
func (c *Cluster) startEtcd(ctx context.Context) error {
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer)
	p, err := c.launch("etcd", defaultStopGrace, nil, "etcd",
		"--name=default",
		"--data-dir="+filepath.Join(c.dir, "etcd"),
		"--listen-client-urls="+c.etcdURL(),
		"--advertise-client-urls="+c.etcdURL(),
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=default="+peer,
		// A test cluster's data is thrown away: skipping fsync makes every
		// write of the API server much faster on a busy disk.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, p, c.etcdURL()+"/health", false)
}
