package imagearch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/apportion-dev/apportion/pkg/registries"
)

// redacted is an error told in apportion's own words: what failed, the
// registry's host, the HTTP status and the registry's standard error codes.
// Never text from the server: a reference may point at a host that is no
// registry (a database console, the instance metadata service), and the
// error becomes an Event note any tenant can read. Unwrap gives the original
// error for errors.Is/As; its text is never printed.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

func isDenied(err error) bool {
	d := (*registries.DeniedError)(nil)
	return errors.As(err, &d)
}

// registryError describes err, the failure of step (e.g. "getting the
// manifest") against the registry host.
func registryError(host, step string, err error) error {
	return &redacted{msg: fmt.Sprintf("%s from %s: %s", step, host, cause(host, err)), err: err}
}

// cause names what went wrong, from a closed vocabulary.
func cause(host string, err error) string {
	var (
		denied *registries.DeniedError
		te     *transport.Error
	)
	switch {
	case errors.As(err, &denied):
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if strings.EqualFold(strings.Trim(host, "[]"), denied.Host) {
			return denied.Error()
		}
		// A redirect or a token service: its name is the server's text.
		return "the registry sent apportion to a host that settings.imageRegistries does not allow (" + denied.Reason.Describe() + ")"
	case errors.As(err, &te):
		return httpCause(te)
	case strings.Contains(err.Error(), "SSRF protection: redirect"):
		// go-containerregistry's own check (an errors.New, no type).
		return "the registry redirected to a private or link-local address, which is refused"
	}
	return connectionCause(err)
}

// connectionCause tells why a request got no answer from the registry: the
// deadline, DNS, the connection, TLS, or a body that is not JSON.
func connectionCause(err error) string {
	var (
		dnsErr   *net.DNSError
		netErr   net.Error
		recErr   tls.RecordHeaderError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "no answer in time"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "host not found"
		}
		return "DNS lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.As(err, &recErr):
		return "the server does not speak TLS"
	case errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return "TLS certificate not trusted"
	case errors.As(err, &alert):
		return "TLS handshake failed"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the connection closed early"
	case errors.As(err, &syntax), errors.As(err, &typ):
		return "the answer is not valid JSON"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "no answer in time"
	}
	return "the request failed"
}

// httpCause is the status and the standard error codes of a registry's
// answer: codes outside the distribution spec's list are left out, since a
// server may put anything in that field.
func httpCause(te *transport.Error) string {
	s := fmt.Sprintf("HTTP %d %s", te.StatusCode, http.StatusText(te.StatusCode))
	var codes []string
	for _, d := range te.Errors {
		if c := string(d.Code); knownCodes[d.Code] && !contains(codes, c) {
			codes = append(codes, c)
		}
	}
	if len(codes) > 0 {
		s += " (" + strings.Join(codes, ", ") + ")"
	}
	return s
}

// knownCodes are the error codes of the OCI distribution spec (and
// docker/distribution's UNAVAILABLE).
var knownCodes = map[transport.ErrorCode]bool{
	transport.BlobUnknownErrorCode:         true,
	transport.BlobUploadInvalidErrorCode:   true,
	transport.BlobUploadUnknownErrorCode:   true,
	transport.DigestInvalidErrorCode:       true,
	transport.ManifestBlobUnknownErrorCode: true,
	transport.ManifestInvalidErrorCode:     true,
	transport.ManifestUnknownErrorCode:     true,
	transport.ManifestUnverifiedErrorCode:  true,
	transport.NameInvalidErrorCode:         true,
	transport.NameUnknownErrorCode:         true,
	transport.SizeInvalidErrorCode:         true,
	transport.TagInvalidErrorCode:          true,
	transport.UnauthorizedErrorCode:        true,
	transport.DeniedErrorCode:              true,
	transport.UnsupportedErrorCode:         true,
	transport.TooManyRequestsErrorCode:     true,
	transport.UnknownErrorCode:             true,
	transport.UnavailableErrorCode:         true,
}
