package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

const pollInterval = 100 * time.Millisecond

// waitFor polls check until it succeeds, the process p (if any) exits, or
// Options.WaitTimeout passes. The error names what was awaited, the last
// failure and where the log is.
func (c *Cluster) waitFor(ctx context.Context, what string, p *process, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.WaitTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		checkCtx, cancelCheck := context.WithTimeout(ctx, 5*time.Second)
		last = check(checkCtx)
		cancelCheck()
		if last == nil {
			return nil
		}
		var exited <-chan struct{}
		if p != nil {
			exited = p.done
		}
		select {
		case <-exited:
			if p.err != nil {
				return fmt.Errorf("waiting for %s: %s exited (%w); %s", what, p.name, p.err, c.logHint(p))
			}
			return fmt.Errorf("waiting for %s: %s exited; %s", what, p.name, c.logHint(p))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("waiting for %s: not ready after %s: %w", what, c.opts.WaitTimeout, last)
			}
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitHTTP waits until url answers 200 OK, dialing inside the namespace.
func (c *Cluster) waitHTTP(ctx context.Context, p *process, url string, clientCert bool) error {
	return c.waitHTTPWith(ctx, c.httpClient(clientCert), p.name+" at "+url, p, url)
}

// waitHTTPWith waits until url answers 200 OK to hc; p, if not nil, is the
// process whose exit ends the wait.
func (c *Cluster) waitHTTPWith(ctx context.Context, hc *http.Client, what string, p *process, url string) error {
	return c.waitFor(ctx, what, p, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, body)
		}
		return nil
	})
}

// httpClient dials from inside the namespace and trusts the cluster's CA;
// with clientCert it presents the admin certificate (the API server's
// /readyz needs an authenticated user).
func (c *Cluster) httpClient(clientCert bool) *http.Client {
	return c.httpClientDialing(c.ns.dial, clientCert)
}

// hostHTTPClient is httpClient dialing from the host's network namespace,
// as kubectl on the host does.
func (c *Cluster) hostHTTPClient(clientCert bool) *http.Client {
	return c.httpClientDialing((&net.Dialer{}).DialContext, clientCert)
}

func (c *Cluster) httpClientDialing(dial func(ctx context.Context, network, address string) (net.Conn, error), clientCert bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.pki.certPEM)
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if clientCert {
		if cert, err := tls.X509KeyPair(c.admin.certPEM, c.admin.keyPEM); err == nil {
			tlsConfig.Certificates = []tls.Certificate{cert}
		}
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:       dial,
			TLSClientConfig:   tlsConfig,
			DisableKeepAlives: true,
		},
	}
}

// logHint says where to read a failed component's log: the default log
// folder is removed with the run folder, so then Start's printed tail is
// all there is.
func (c *Cluster) logHint(p *process) string {
	if c.opts.LogDir == "" {
		return "see the log tails Start printed (set Options.LogDir to keep the logs)"
	}
	return "log: " + p.logPath
}
