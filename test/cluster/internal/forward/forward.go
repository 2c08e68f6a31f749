// Package forward copies TCP connections from a listener to a target,
// byte for byte. The cluster launcher uses it to expose the API server,
// which lives in a private network namespace, on the host's loopback.
package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// DialFunc opens a connection to the target.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Serve accepts connections on l and pipes each to a new connection to
// target until l is closed. TLS passes through untouched: clients verify
// the API server itself.
func Serve(l net.Listener, dial DialFunc, target string) error {
	for {
		in, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go pipe(in, dial, target)
	}
}

func pipe(in net.Conn, dial DialFunc, target string) {
	defer in.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	out, err := dial(ctx, "tcp", target)
	cancel()
	if err != nil {
		return
	}
	defer out.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	// Each direction half-closes the other side when it ends, so a client
	// that stops writing still gets the rest of the answer.
	go func() { defer wg.Done(); copyAndCloseWrite(out, in) }()
	go func() { defer wg.Done(); copyAndCloseWrite(in, out) }()
	wg.Wait()
}

func copyAndCloseWrite(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}
