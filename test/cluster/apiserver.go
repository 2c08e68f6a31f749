package cluster

import (
	"context"
	"path/filepath"
	"strconv"
)

// serviceCIDR is the range ClusterIPs come from. It must not overlap
// PodCIDR, the range kwok gives pod IPs from.
const serviceCIDR = "10.0.0.0/24"

// startAPIServer runs kube-apiserver on 127.0.0.1 with the cluster's
// certificates, RBAC and service-account tokens, and waits for /readyz.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	args := []string{
		"--etcd-servers=" + c.etcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.ports.apiserver),
		// Without a cert-dir it writes to /var/run/kubernetes.
		"--cert-dir=" + filepath.Join(c.dir, "apiserver"),
		"--tls-cert-file=" + c.pkiPath("apiserver.crt"),
		"--tls-private-key-file=" + c.pkiPath("apiserver.key"),
		"--client-ca-file=" + c.pkiPath("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.pkiPath("sa.pub"),
		"--service-account-signing-key-file=" + c.pkiPath("sa.key"),
		// Only allocated, never routed: the namespace has no route but lo.
		"--service-cluster-ip-range=" + serviceCIDR,
		// Dial webhook (and aggregated API) Services at their endpoints,
		// i.e. the pod IPs, not at the ClusterIP: with no kube-proxy nothing
		// routes a ClusterIP, while a pod IP can be put on lo (see
		// AddLoopbackAddress) for a server the test runs.
		"--enable-aggregator-routing=true",
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// The default reconciler rejects a loopback advertise address and
		// logs an error every 10 s; nothing here uses the endpoints.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--requestheader-client-ca-file=" + c.pkiPath("ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + c.pkiPath("front-proxy-client.crt"),
		"--proxy-client-key-file=" + c.pkiPath("front-proxy-client.key"),
	}
	args = append(args, c.opts.APIServerFlags...)
	p, err := c.launch("kube-apiserver", apiserverStopGrace, nil, "kube-apiserver", args...)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, p, c.APIServerURL()+"/readyz", true)
}
