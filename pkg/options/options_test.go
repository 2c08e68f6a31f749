package options

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parse builds Options from args as `apportion webhook` does, with a cert
// dir that holds the two files unless args name another.
func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	certs := t.TempDir()
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(certs, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var o Options
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse(append([]string{"--cert-dir=" + certs}, args...)); err != nil {
		t.Fatal(err)
	}
	return &o
}

func TestDefaultsAreValid(t *testing.T) {
	o := parse(t)
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	if got := o.Excluded(); len(got) != 2 || got[0] != "kube-system" || got[1] != "kube-system" {
		t.Errorf("Excluded() = %v, want the default and the system namespace", got)
	}
}

func TestBadInputNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--webhook-port=0"}, "--webhook-port"},
		{[]string{"--gate-timeout=0s"}, "--gate-timeout"},
		{[]string{"--api-check-interval=-1m"}, "--api-check-interval"},
		{[]string{"--lease-duration=5s", "--renew-deadline=10s"}, "--lease-duration"},
		{[]string{"--system-namespace="}, "--system-namespace"},
		{[]string{"--log-level=loud"}, "--log-level"},
		{[]string{"--metrics-bind-address=nope"}, "--metrics-bind-address"},
		{[]string{"--health-probe-bind-address=:99999"}, "--health-probe-bind-address"},
		{[]string{"--excluded-namespaces=ok,Not_A_Namespace"}, `"Not_A_Namespace" is not a namespace name`},
		{[]string{"--cert-dir=" + filepath.Join(os.TempDir(), "apportion-no-such-dir")}, "--cert-dir"},
	} {
		err := parse(t, tc.args...).Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
	if err := parse(t, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0").Validate(); err != nil {
		t.Errorf("\"0\" (disabled) and port 0 (any free port) rejected: %v", err)
	}
}

func TestBadEnvironmentValueIsReported(t *testing.T) {
	t.Setenv("GATE_TIMEOUT", "soon")
	err := parse(t).Validate()
	if err == nil || !strings.Contains(err.Error(), `GATE_TIMEOUT="soon"`) {
		t.Errorf("error %v, want one naming GATE_TIMEOUT", err)
	}
	t.Setenv("GATE_TIMEOUT", "45s")
	if o := parse(t); o.GateTimeout.Seconds() != 45 {
		t.Errorf("GATE_TIMEOUT=45s gave %s", o.GateTimeout)
	}
}
