package options

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
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
		{[]string{"--profiling-bind-address=6060"}, "--profiling-bind-address"},
		{[]string{"--kube-api-burst=0"}, "--kube-api-burst"},
		{[]string{"--excluded-namespaces=ok,Not_A_Namespace"}, `"Not_A_Namespace" is not a namespace name`},
		{[]string{"--cert-dir=" + filepath.Join(os.TempDir(), "apportion-no-such-dir")}, "--cert-dir"},
		{[]string{"--architectures=some"}, "--architectures"},
		{[]string{"--image-timeout=30s", "--gate-timeout=30s"}, "--image-timeout"},
		{[]string{"--image-timeout=0s"}, "--image-timeout"},
		{[]string{"--image-cache-size=0"}, "--image-cache-size"},
		{[]string{"--if-not-present-cache-time=0s"}, "--if-not-present-cache-time"},
		{[]string{"--pull-always-cache-time=-1s"}, "--pull-always-cache-time"},
		{[]string{"--image-failure-cache-time=0s"}, "--image-failure-cache-time"},
		{[]string{"--webhook-scope=namespace"}, "--webhook-scope"},
		{[]string{"--capacity-timeout=0s"}, "--capacity-timeout"},
		{[]string{"--capacity-ttl=10m", "--capacity-max-ttl=5m"}, "--capacity-ttl"},
		{[]string{"--capacity-delete-qps=-1"}, "--capacity-delete-qps"},
		{[]string{"--runtime-class-profiles=kata-remote"}, "--runtime-class-profiles: want a JSON list"},
		{[]string{`--runtime-class-profiles=[{"runtimeClassName":"kata-remote","resource":"cpu"}]`}, `--runtime-class-profiles: entry 1 (runtimeClassName "kata-remote"): resource "cpu"`},
	} {
		err := parse(t, tc.args...).Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
	if err := parse(t, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0").Validate(); err != nil {
		t.Errorf("\"0\" (disabled) and port 0 (any free port) rejected: %v", err)
	}
	if err := parse(t, "--kube-api-qps=-1", "--kube-api-burst=0").Validate(); err != nil {
		t.Errorf("no client-side limit (negative --kube-api-qps) wants no burst, but was rejected: %v", err)
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

// selfManaged is the chart's configuration: an empty cert dir and the names
// of the Secret, the Service and the two webhook configurations.
func selfManaged(t *testing.T, args ...string) *Options {
	t.Helper()
	return parse(t, append([]string{"--cert-dir=" + filepath.Join(t.TempDir(), "serving-certs"),
		"--cert-secret-name=apportion-webhook-cert", "--webhook-service-name=apportion-webhook",
		"--mutating-webhook-configuration=apportion", "--validating-webhook-configuration=apportion.dev"}, args...)...)
}

func TestSelfManagedCertificates(t *testing.T) {
	o := selfManaged(t)
	if err := o.Validate(); err != nil {
		t.Fatalf("an empty, missing cert dir should do with --cert-secret-name: %v", err)
	}
	if o.CAValidity != 87600*time.Hour || o.CertValidity != 8760*time.Hour || o.CertRenewBefore != 720*time.Hour {
		t.Errorf("validities %s, %s, renew before %s; want 87600h, 8760h, 720h", o.CAValidity, o.CertValidity, o.CertRenewBefore)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(o.CertDir, "*")); len(leftovers) > 0 {
		t.Errorf("the write check left files: %v", leftovers)
	}
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--webhook-service-name="}, "--webhook-service-name is required"},
		{[]string{"--webhook-service-name=Web_Hook"}, "--webhook-service-name"},
		{[]string{"--webhook-service-name=svc.with.dots"}, "--webhook-service-name"},
		{[]string{"--cert-secret-name=Not_A_Name"}, "--cert-secret-name"},
		{[]string{"--mutating-webhook-configuration=-bad"}, "--mutating-webhook-configuration"},
		{[]string{"--validating-webhook-configuration=bad/"}, "--validating-webhook-configuration"},
		{[]string{"--cert-renew-before=0s"}, "--cert-renew-before"},
		{[]string{"--cert-renew-before=9000h"}, "--cert-renew-before"},
		{[]string{"--cert-validity=90000h"}, "--ca-validity"},
		{[]string{"--cert-dir=" + filepath.Join(notADir, "certs")}, "--cert-dir must be writable"},
	} {
		err := selfManaged(t, tc.args...).Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--mutating-webhook-configuration=", "--validating-webhook-configuration="},
		{"--cert-validity=87600h"},
	} {
		if err := selfManaged(t, args...).Validate(); err != nil {
			t.Errorf("%v rejected: %v", args, err)
		}
	}
}

func TestWithoutSecretTheCertificateMustBeThere(t *testing.T) {
	if err := parse(t, "--cert-dir="+t.TempDir()).Validate(); err == nil || !strings.Contains(err.Error(), "tls.crt") {
		t.Errorf("empty cert dir without --cert-secret-name: error %v, want one naming tls.crt", err)
	}
}

func TestCertificateAndShutdownEnvironment(t *testing.T) {
	for k, v := range map[string]string{
		"CERT_SECRET_NAME": "certs", "WEBHOOK_SERVICE_NAME": "hook", "MUTATING_WEBHOOK_CONFIGURATION": "m",
		"VALIDATING_WEBHOOK_CONFIGURATION": "v", "CA_VALIDITY": "1000h", "CERT_VALIDITY": "100h",
		"CERT_RENEW_BEFORE": "10h", "GRACEFUL_SHUTDOWN_TIMEOUT": "40s",
	} {
		t.Setenv(k, v)
	}
	o := parse(t)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.CertSecretName != "certs" || o.WebhookServiceName != "hook" || o.MutatingWebhookConfiguration != "m" ||
		o.ValidatingWebhookConfiguration != "v" || o.CAValidity != 1000*time.Hour || o.CertValidity != 100*time.Hour ||
		o.CertRenewBefore != 10*time.Hour || o.GracefulShutdownTimeout != 40*time.Second {
		t.Errorf("environment not applied: %+v", o)
	}
	if o = parse(t, "--graceful-shutdown-timeout=5s"); o.GracefulShutdownTimeout != 5*time.Second {
		t.Errorf("the flag did not win over the environment: %s", o.GracefulShutdownTimeout)
	}
	t.Setenv("GRACEFUL_SHUTDOWN_TIMEOUT", "0s")
	if err := parse(t).Validate(); err == nil || !strings.Contains(err.Error(), "--graceful-shutdown-timeout") {
		t.Errorf("zero shutdown timeout: error %v", err)
	}
}

func TestRuntimeClassProfiles(t *testing.T) {
	o := parse(t)
	if err := o.Validate(); err != nil || o.Profiles() != nil {
		t.Errorf("default: profiles %v, error %v; want none", o.Profiles(), err)
	}
	raw := `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","quantity":"1","keepRequests":true},{"runtimeClassName":"kata-qemu","resource":"example.com/vm","quantity":2,"keepRequests":false}]`
	o = parse(t, "--runtime-class-profiles="+raw)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	got := o.Profiles()
	qemu := got["kata-qemu"].Quantity
	if len(got) != 2 || got["kata-remote"].Resource != "kata.peerpods.io/vm" || !got["kata-remote"].KeepRequests ||
		qemu.Cmp(resource.MustParse("2")) != 0 || got["kata-qemu"].KeepRequests {
		t.Errorf("Profiles() = %+v", got)
	}
	// The chart's way: the environment, as toJson writes it.
	t.Setenv("RUNTIME_CLASS_PROFILES", `[{"keepRequests":true,"quantity":"1","resource":"kata.peerpods.io/vm","runtimeClassName":"kata-remote"}]`)
	o = parse(t)
	if err := o.Validate(); err != nil || len(o.Profiles()) != 1 {
		t.Errorf("RUNTIME_CLASS_PROFILES: profiles %v, error %v", o.Profiles(), err)
	}
	t.Setenv("RUNTIME_CLASS_PROFILES", "[]")
	if o = parse(t); o.Validate() != nil || o.Profiles() != nil {
		t.Errorf("RUNTIME_CLASS_PROFILES=[] (the chart's default): profiles %v", o.Profiles())
	}
}

// Pull secrets are read only when asked: the default install has no
// permission to read them.
func TestReadPullSecretsIsOptIn(t *testing.T) {
	if o := parse(t); o.ReadPullSecrets {
		t.Error("--read-pull-secrets is on by default")
	}
	if o := parse(t, "--read-pull-secrets"); !o.ReadPullSecrets {
		t.Error("--read-pull-secrets did not turn it on")
	}
	t.Setenv("READ_PULL_SECRETS", "true")
	if o := parse(t); !o.ReadPullSecrets {
		t.Error("READ_PULL_SECRETS=true did not turn it on")
	}
	if o := parse(t, "--read-pull-secrets=false"); o.ReadPullSecrets {
		t.Error("the flag did not win over the environment")
	}
	t.Setenv("READ_PULL_SECRETS", "maybe")
	if err := parse(t).Validate(); err == nil || !strings.Contains(err.Error(), "READ_PULL_SECRETS") {
		t.Errorf("READ_PULL_SECRETS=maybe: error %v", err)
	}
}

func TestImageRegistries(t *testing.T) {
	o := parse(t)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if v := o.Registries().Host("169.254.169.254", "80"); v.Allowed {
		t.Error("default: the metadata service is allowed")
	}
	if v := o.Registries().Host("123456789012.dkr.ecr.us-east-1.amazonaws.com", "443"); !v.Allowed {
		t.Error("default: ECR is denied")
	}

	t.Setenv("IMAGE_REGISTRIES", `{"allow":["127.0.0.1:5000"]}`)
	o = parse(t)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if v := o.Registries().Host("127.0.0.1", "5000"); !v.Allowed {
		t.Error("IMAGE_REGISTRIES: the allowed host is denied")
	}
	o = parse(t, `--image-registries={"deny":["*.corp.example"]}`)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if v := o.Registries().Host("127.0.0.1", "5000"); v.Allowed {
		t.Error("the flag did not win over the environment")
	}
	if v := o.Registries().Host("r.corp.example", "443"); v.Allowed {
		t.Error("--image-registries: the denied host is allowed")
	}

	err := parse(t, `--image-registries={"allow":["https://registry.example.com"]}`).Validate()
	if err == nil || !strings.Contains(err.Error(), "--image-registries") || !strings.Contains(err.Error(), "not a URL") {
		t.Errorf("a URL entry: error %v", err)
	}
}

func TestArchitectureRules(t *testing.T) {
	o := parse(t)
	if err := o.Validate(); err != nil || len(o.ArchRules()) != 0 {
		t.Errorf("default: rules %v, error %v; want none", o.ArchRules(), err)
	}
	// The chart's way: the environment, as toJson writes it ({} by default).
	t.Setenv("ARCHITECTURE_RULES", "{}")
	if o = parse(t); o.Validate() != nil || len(o.ArchRules()) != 0 {
		t.Errorf("ARCHITECTURE_RULES={}: rules %v", o.ArchRules())
	}
	t.Setenv("ARCHITECTURE_RULES", `{"arm64":{"requireNodeLabels":{"node-group":"graviton"},"taintsToTolerate":[{"effect":"NoSchedule","key":"arch","value":"arm64"}]}}`)
	o = parse(t)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if arm := o.ArchRules()["arm64"]; len(o.ArchRules()) != 1 || arm.RequireNodeLabels["node-group"] != "graviton" ||
		len(arm.TaintsToTolerate) != 1 || arm.TaintsToTolerate[0].Key != "arch" {
		t.Errorf("ARCHITECTURE_RULES: rules %+v", o.ArchRules())
	}
	o = parse(t, `--architecture-rules={"amd64":{"requireNodeLabels":[{"node-group":"x86"}]}}`)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, ok := o.ArchRules()["arm64"]; ok || o.ArchRules()["amd64"].RequireNodeLabels["node-group"] != "x86" {
		t.Errorf("the flag did not win over the environment: %+v", o.ArchRules())
	}
	err := parse(t, `--architecture-rules={"arm64":{"taintsToTolerate":[{"key":"arch","effect":"Never"}]}}`).Validate()
	if err == nil || !strings.Contains(err.Error(), "--architecture-rules: arm64: taintsToTolerate[0]: effect must be") {
		t.Errorf("a bad effect: error %v", err)
	}
}

// TestDriftAfter: --drift-after defaults to 10m, reads DRIFT_AFTER, takes 0
// (off), and refuses a negative duration.
func TestDriftAfter(t *testing.T) {
	if o := parse(t); o.DriftAfter != 10*time.Minute {
		t.Errorf("default %v, want 10m", o.DriftAfter)
	}
	t.Setenv("DRIFT_AFTER", "0s")
	if o := parse(t); o.DriftAfter != 0 || o.Validate() != nil {
		t.Errorf("DRIFT_AFTER=0s: %v, %v; want 0 and valid", o.DriftAfter, o.Validate())
	}
	if o := parse(t, "--drift-after=15s"); o.DriftAfter != 15*time.Second {
		t.Errorf("--drift-after=15s: %v", o.DriftAfter)
	}
	if err := parse(t, "--drift-after=-1m").Validate(); err == nil || !strings.Contains(err.Error(), "--drift-after must not be negative") {
		t.Errorf("--drift-after=-1m: error %v", err)
	}
}

func TestDefaultMode(t *testing.T) {
	o := parse(t)
	if err := o.Validate(); err != nil || o.DefaultMode != "required" {
		t.Errorf("default: mode %q, error %v; want required", o.DefaultMode, err)
	}
	// The chart's way: the environment.
	t.Setenv("DEFAULT_MODE", "shadow")
	if o = parse(t); o.Validate() != nil || o.DefaultMode != "shadow" {
		t.Errorf("DEFAULT_MODE=shadow: mode %q", o.DefaultMode)
	}
	if o = parse(t, "--default-mode= Preferred "); o.Validate() != nil || o.DefaultMode != "preferred" {
		t.Errorf("the flag did not win over the environment, or was not normalised: %q", o.DefaultMode)
	}
	err := parse(t, "--default-mode=dry-run").Validate()
	if err == nil || !strings.Contains(err.Error(), `--default-mode must be required, preferred or shadow, got "dry-run"`) {
		t.Errorf("an unknown mode: error %v", err)
	}
}
