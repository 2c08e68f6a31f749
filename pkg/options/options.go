// Package options holds the flags of `apportion webhook`: one struct, kebab-case
// flags, each with an UPPER_SNAKE environment variable as its default, all
// validated at start-up.
package options

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/profiles"
	"github.com/apportion-dev/apportion/pkg/registries"
)

// Options configure the webhook process.
type Options struct {
	MetricsBindAddress string
	// MetricsSecure serves metrics over HTTPS to callers the API server
	// authenticates and authorizes (get on /metrics).
	MetricsSecure          bool
	HealthProbeBindAddress string
	WebhookHost            string
	WebhookPort            int
	CertDir                string
	LeaderElect            bool
	LeaderElectionID       string
	SystemNamespace        string
	LeaseDuration          time.Duration
	RenewDeadline          time.Duration
	RetryPeriod            time.Duration
	GateTimeout            time.Duration
	APICheckInterval       time.Duration
	ExcludedNamespaces     []string
	LogLevel               string
	// KubeAPIQPS and KubeAPIBurst bound the client's own request rate to
	// the API server (under API Priority and Fairness, which queues what
	// passes); a negative QPS turns the client-side limit off.
	KubeAPIQPS   float64
	KubeAPIBurst int
	// ProfilingBindAddress serves Go's pprof handlers; empty: off.
	ProfilingBindAddress string
	// GracefulShutdownTimeout bounds the whole stop sequence after SIGTERM,
	// in-flight admission requests included.
	GracefulShutdownTimeout time.Duration

	// Self-managed certificates: when CertSecretName is set, the process
	// keeps the serving certificate in that Secret (in SystemNamespace) and
	// writes it to CertDir itself.
	CertSecretName                 string
	WebhookServiceName             string
	MutatingWebhookConfiguration   string
	ValidatingWebhookConfiguration string
	CAValidity                     time.Duration
	CertValidity                   time.Duration
	CertRenewBefore                time.Duration

	// Architectures from images: which pods are inspected (see the
	// Architectures* constants), how long the placement controller waits
	// for a look-up, and the image cache's bounds.
	Architectures string
	// WebhookScope is how the pod webhook is scoped (WebhookScope*): with
	// namespaces, apportion labels the namespaces that need it.
	WebhookScope          string
	ImageTimeout          time.Duration
	ImageCacheSize        int
	IfNotPresentCacheTime time.Duration
	PullAlwaysCacheTime   time.Duration
	ImageFailureCacheTime time.Duration
	// ReadPullSecrets has image look-ups use the pods' image pull secrets
	// and their ServiceAccounts' (read from the API by name, which needs
	// get on secrets and serviceaccounts in every namespace). Off: only
	// apportion's own identity (ECR through IRSA or EKS Pod Identity), then
	// anonymous access.
	ReadPullSecrets bool
	// ImageRegistries is --image-registries, the JSON of the registry hosts
	// image look-ups may connect to ({"allow":[...],"deny":[...]} over
	// built-in denials of loopback, link-local and in-cluster names);
	// Validate parses it (see Registries).
	ImageRegistries string
	registries      *registries.Policy
	// ArchitectureRules is --architecture-rules, the JSON of the
	// tolerations and required node labels a pod gains, in node-label mode,
	// for each architecture its images run on; Validate parses it (see
	// ArchRules).
	ArchitectureRules string
	archRules         decision.ArchitectureRules
	// DefaultMode is --default-mode, the placement mode of workloads that
	// name none (no apportion.dev/mode, no PlacementPolicy spec.mode):
	// required, preferred or shadow (annotations.Mode*).
	DefaultMode string

	// Capacity fallback: how long a decided pod may stay unschedulable with
	// no NodeClaim on its way before its NodePool (or node group) counts
	// as out of capacity, for how long it stays out (doubling on repeated
	// outages up to the max), how fast stuck pods are deleted, and whether
	// node groups without a node now may scale from zero.
	CapacityTimeout   time.Duration
	CapacityTTL       time.Duration
	CapacityMaxTTL    time.Duration
	CapacityDeleteQPS float64
	// CapacityNominationWait is how long an unschedulable pod may go
	// without Karpenter nominating it or launching a NodeClaim of its pool
	// before its workload moves to its other groups.
	CapacityNominationWait time.Duration
	ScaleFromZero          bool
	// DecisionKeyFile holds the key every replica signs decisions with
	// (the chart mounts it from a Secret); empty: a random key per process.
	DecisionKeyFile string
	Rebalance       bool
	// DriftAfter is how long a workload placed by a strategy may stay off
	// it (outside quota, or with a group left out) before a SplitDrift
	// Warning Event and apportion_workload_drift 1; 0 turns both off
	// (apportion_workload_pods stays).
	DriftAfter time.Duration
	// PodName is this replica's own pod (in SystemNamespace).
	PodName string

	// RuntimeClassProfiles is --runtime-class-profiles, the JSON list of
	// runtime-class profiles; Validate parses it (see Profiles).
	RuntimeClassProfiles string
	profiles             []profiles.Profile

	envErrs []error
}

// Values of --architectures.
const (
	// ArchitecturesOptIn inspects the images of pods with a strategy, and
	// places pods without one by architecture only where their namespace
	// (label) or workload (annotation) says apportion.dev/architectures: auto.
	ArchitecturesOptIn = "opt-in"
	// ArchitecturesAll also places every other pod by architecture.
	ArchitecturesAll = "all"
	// ArchitecturesOff inspects no image.
	ArchitecturesOff = "off"

	// WebhookScopeAll: the pod webhook is called for every pod outside the
	// excluded namespaces (a manual install; the chart's webhook.scope: all).
	WebhookScopeAll = "all"
	// WebhookScopeNamespaces: the pod webhook is called for pods of
	// namespaces labelled apportion.dev/placement: enabled, and for pods
	// that carry an apportion annotation or a profile's runtimeClassName;
	// apportion labels a namespace when a workload or PlacementPolicy in it
	// opts in.
	WebhookScopeNamespaces = "namespaces"
)

// AddFlags registers the flags; defaults come from the environment.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", env("METRICS_BIND_ADDRESS", ":8080"), "address of the Prometheus metrics endpoint; \"0\" disables it")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.envBool("METRICS_SECURE", false), "serve metrics over HTTPS (a self-signed certificate made at start) to callers whose bearer token the API server accepts (TokenReview) and who may get the non-resource URL /metrics (SubjectAccessReview); needs create on tokenreviews and subjectaccessreviews")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", env("HEALTH_PROBE_BIND_ADDRESS", ":8081"), "address of /healthz and /readyz")
	fs.StringVar(&o.WebhookHost, "webhook-host", env("WEBHOOK_HOST", ""), "address the webhook server listens on (empty: all)")
	fs.IntVar(&o.WebhookPort, "webhook-port", o.envInt("WEBHOOK_PORT", 9443), "port of the webhook server")
	fs.StringVar(&o.CertDir, "cert-dir", env("CERT_DIR", "/tmp/k8s-webhook-server/serving-certs"), "directory with tls.crt and tls.key, reloaded when they change")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.envBool("LEADER_ELECT", true), "elect one placement leader among replicas")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", env("LEADER_ELECTION_ID", "apportion-placement"), "name of the leader election Lease")
	fs.StringVar(&o.SystemNamespace, "system-namespace", env("SYSTEM_NAMESPACE", "kube-system"), "namespace of the Lease and of apportion itself (never mutated)")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.envDuration("LEASE_DURATION", 15*time.Second), "leader lease duration: how long a dead leader blocks a takeover")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", o.envDuration("RENEW_DEADLINE", 10*time.Second), "how long the leader retries renewing before it steps down")
	fs.DurationVar(&o.RetryPeriod, "retry-period", o.envDuration("RETRY_PERIOD", 500*time.Millisecond), "interval between leader election attempts (the leader renews, the others check, at this pace, each wait stretched by up to 1.2x at random): a dead leader is replaced between one lease duration and that plus about two retry periods later")
	fs.DurationVar(&o.GateTimeout, "gate-timeout", o.envDuration("GATE_TIMEOUT", 30*time.Second), "release a pod held this long without a decision")
	fs.DurationVar(&o.APICheckInterval, "api-check-interval", o.envDuration("API_CHECK_INTERVAL", time.Minute), "how often to check whether the NodePool or Rollout API appeared or went away since start (then exit, to be restarted in the right mode)")
	fs.Func("excluded-namespaces", "comma-separated namespaces whose pods are never touched (default kube-system; the system namespace is always excluded)", func(v string) error {
		o.ExcludedNamespaces = splitList(v)
		return nil
	})
	o.ExcludedNamespaces = splitList(env("EXCLUDED_NAMESPACES", "kube-system"))
	fs.Float64Var(&o.KubeAPIQPS, "kube-api-qps", o.envFloat("KUBE_API_QPS", 500), "requests per second this replica may send to the API server per resource (pods, events, ...), averaged: a bound on a runaway loop, well above what a burst of pods needs (about one write per placed pod, as fast as the ReplicaSet controller creates them), so that API Priority and Fairness, not this limit, paces apportion; negative: no client-side limit")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.envInt("KUBE_API_BURST", 1000), "requests this replica may send to the API server at once above --kube-api-qps")
	fs.StringVar(&o.ProfilingBindAddress, "profiling-bind-address", env("PROFILING_BIND_ADDRESS", ""), "address of Go's pprof handlers (/debug/pprof/), for profiling a replica under load; empty: off. Bind it to 127.0.0.1 and reach it with kubectl port-forward")
	fs.StringVar(&o.LogLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info or error")
	fs.DurationVar(&o.GracefulShutdownTimeout, "graceful-shutdown-timeout", o.envDuration("GRACEFUL_SHUTDOWN_TIMEOUT", 25*time.Second), "how long stopping may take after SIGTERM, draining in-flight admission requests included; keep it below the pod's terminationGracePeriodSeconds")
	fs.StringVar(&o.CertSecretName, "cert-secret-name", env("CERT_SECRET_NAME", ""), "Secret in the system namespace in which apportion keeps its own CA and serving certificate, renews them and writes them to --cert-dir (empty: --cert-dir is filled by someone else)")
	fs.StringVar(&o.WebhookServiceName, "webhook-service-name", env("WEBHOOK_SERVICE_NAME", ""), "Service of the webhook in the system namespace, whose DNS names the serving certificate covers (required with --cert-secret-name)")
	fs.StringVar(&o.MutatingWebhookConfiguration, "mutating-webhook-configuration", env("MUTATING_WEBHOOK_CONFIGURATION", ""), "MutatingWebhookConfiguration whose CA bundle is kept up to date with --cert-secret-name (empty: none)")
	fs.StringVar(&o.ValidatingWebhookConfiguration, "validating-webhook-configuration", env("VALIDATING_WEBHOOK_CONFIGURATION", ""), "ValidatingWebhookConfiguration whose CA bundle is kept up to date with --cert-secret-name (empty: none)")
	fs.DurationVar(&o.CAValidity, "ca-validity", o.envDuration("CA_VALIDITY", 87600*time.Hour), "validity of a CA generated with --cert-secret-name")
	fs.DurationVar(&o.CertValidity, "cert-validity", o.envDuration("CERT_VALIDITY", 8760*time.Hour), "validity of a serving certificate generated with --cert-secret-name")
	fs.DurationVar(&o.CertRenewBefore, "cert-renew-before", o.envDuration("CERT_RENEW_BEFORE", 720*time.Hour), "replace the CA or the serving certificate this long before it expires")
	fs.StringVar(&o.Architectures, "architectures", env("ARCHITECTURES", ArchitecturesOptIn), "which pods get architectures from their images: opt-in (pods with a strategy, and pods without one whose namespace label or workload annotation apportion.dev/architectures is \"auto\"), all (every pod), off (no image is inspected)")
	fs.StringVar(&o.WebhookScope, "webhook-scope", env("WEBHOOK_SCOPE", WebhookScopeAll), "how the pod webhook configuration is scoped: all (every pod outside the excluded namespaces) or namespaces (namespaces labelled apportion.dev/placement: enabled, and pods carrying an apportion.dev/* or strategy annotation or a profile's runtimeClassName; apportion then labels a namespace when a workload or PlacementPolicy in it opts in, which needs patch on namespaces)")
	fs.DurationVar(&o.ImageTimeout, "image-timeout", o.envDuration("IMAGE_TIMEOUT", 3*time.Second), "how long placement waits for a pod's image platforms before placing it without an architecture constraint (keep it well inside --gate-timeout)")
	fs.IntVar(&o.ImageCacheSize, "image-cache-size", o.envInt("IMAGE_CACHE_SIZE", 10000), "image references whose platforms are kept in memory")
	fs.DurationVar(&o.IfNotPresentCacheTime, "if-not-present-cache-time", o.envDuration("IF_NOT_PRESENT_CACHE_TIME", 168*time.Hour), "how long the platforms of a tag pulled IfNotPresent (or Never) are cached; digests are cached until evicted")
	fs.DurationVar(&o.PullAlwaysCacheTime, "pull-always-cache-time", o.envDuration("PULL_ALWAYS_CACHE_TIME", time.Minute), "how long the platforms of a tag pulled Always are cached (0: not cached)")
	fs.DurationVar(&o.CapacityTimeout, "capacity-timeout", o.envDuration("CAPACITY_TIMEOUT", 3*time.Minute), "how long a placed pod may stay unschedulable, with no NodeClaim of its NodePool on its way, before the NodePool (or node group) counts as out of capacity (per workload: annotation apportion.dev/capacity-timeout)")
	fs.DurationVar(&o.CapacityTTL, "capacity-ttl", o.envDuration("CAPACITY_TTL", 3*time.Minute), "how long a NodePool (or node group) out of capacity is left out of new decisions; doubled each time it is out again soon after")
	fs.DurationVar(&o.CapacityMaxTTL, "capacity-max-ttl", o.envDuration("CAPACITY_MAX_TTL", 30*time.Minute), "the longest a NodePool (or node group) is left out at once")
	fs.DurationVar(&o.CapacityNominationWait, "capacity-nomination-wait", o.envDuration("CAPACITY_NOMINATION_WAIT", 12*time.Second), "how long a placed pod may stay unschedulable while Karpenter nominates it to no NodeClaim and launches none of its NodePool, before that workload's pods go to its other groups (Karpenter's batch window, 10s by default, plus a margin)")
	fs.DurationVar(&o.DriftAfter, "drift-after", o.envDuration("DRIFT_AFTER", 10*time.Minute), "how long a workload placed by a strategy may run off it (outside its quota, or with a group no NodePool can serve left out) before a SplitDrift Warning Event on the workload and apportion_workload_drift 1; 0: neither (apportion_workload_pods stays)")
	fs.StringVar(&o.DecisionKeyFile, "decision-key-file", env("DECISION_KEY_FILE", ""), "file with the key (at least 32 bytes) every replica signs its decisions with, so that decision annotations a client wrote are never taken for apportion's; empty: a random key per process (decisions of other replicas and earlier runs are then not recognised)")
	fs.Float64Var(&o.CapacityDeleteQPS, "capacity-delete-qps", o.envFloat("CAPACITY_DELETE_QPS", 2), "pods per second that may be deleted (so their controller recreates them elsewhere) when their NodePool is out of capacity; 0 deletes none")
	fs.StringVar(&o.PodName, "pod-name", env("POD_NAME", ""), "this replica's own pod, in --system-namespace (the chart sets it): once the pod is being deleted, the webhook server closes each admission connection after its next response, so the API server moves to the other replicas before SIGTERM")
	fs.BoolVar(&o.Rebalance, "rebalance", o.envBool("REBALANCE", false), "replace the fallback pods of workloads annotated apportion.dev/rebalance: \"true\", one at a time per workload through the Eviction API (PodDisruptionBudgets apply), once a group they fell back from is back; needs pods/eviction create")
	fs.BoolVar(&o.ScaleFromZero, "scale-from-zero", o.envBool("SCALE_FROM_ZERO", false), "node-label mode (no Karpenter): serve a group even when no node has its labels now, because its node group can scale from zero")
	fs.StringVar(&o.RuntimeClassProfiles, "runtime-class-profiles", env("RUNTIME_CLASS_PROFILES", ""), `runtime-class profiles (peer pods), a JSON list: [{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","quantity":"1","keepRequests":true,"vmSizing":false}]; pods of such a class get their cpu and memory requests and limits replaced by the extended resource on the first container, the removed values recorded in the annotation apportion.dev/original-resources unless keepRequests is false; with vmSizing true, the removed cpu, memory and nvidia.com/gpu (limits over requests, init containers as the kubelet sums them) also become Kata's io.katacontainers.config.hypervisor.default_vcpus, default_memory and default_gpus annotations, never over a value the pod sets (empty: none)`)
	fs.BoolVar(&o.ReadPullSecrets, "read-pull-secrets", o.envBool("READ_PULL_SECRETS", false), "read the image pull secrets of each pod and of its ServiceAccount (get by name, in the pod's namespace) to inspect private images, as the kubelet pulls them; needs get on secrets and serviceaccounts in every namespace. Off: only apportion's own identity (ECR through IRSA or EKS Pod Identity), then anonymous access")
	fs.StringVar(&o.ImageRegistries, "image-registries", env("IMAGE_REGISTRIES", ""), `registry hosts image look-ups may connect to, as JSON: {"allow":["registry.tools.svc.cluster.local:5000"],"deny":["*.corp.example","10.0.0.0/8"]}; entries are host, host:port, *.domain, an IP address (optionally with a port), a CIDR range, or * (every name). An allow entry wins, then a deny entry, then the built-in denials (loopback, link-local such as the instance metadata service 169.254.169.254, the other clouds' metadata services such as Alibaba Cloud's 100.100.100.200 and metadata.google.internal, in-cluster names: *.svc, *.cluster.local and names without a dot); anything else is allowed, private ranges included (ECR through a VPC endpoint resolves to private addresses). Names are checked again once resolved, redirects included (empty: the built-in denials alone)`)
	fs.StringVar(&o.ArchitectureRules, "architecture-rules", env("ARCHITECTURE_RULES", ""), `node-label mode (no Karpenter): tolerations and required node labels by architecture, as JSON: {"arm64":{"taintsToTolerate":[{"key":"arch","value":"arm64","effect":"NoSchedule"}],"requireNodeLabels":{"node-group":"graviton"}}}; a pod whose placement allows an architecture its images run on gains that architecture's tolerations, and its required node labels in every required node selector term (none it already has). Ignored with Karpenter, where a NodePool opts in with the annotation apportion.dev/tolerate (empty: none)`)
	fs.StringVar(&o.DefaultMode, "default-mode", env("DEFAULT_MODE", annotations.ModeRequired), "placement mode of workloads that name none (no apportion.dev/mode annotation on the pod template or workload, no spec.mode on their PlacementPolicy): required (hard node affinity), preferred (preferred terms Karpenter may relax) or shadow (pods are decided but not changed: the decision is recorded in the annotation apportion.dev/shadow, for a safe first install)")
	fs.DurationVar(&o.ImageFailureCacheTime, "image-failure-cache-time", o.envDuration("IMAGE_FAILURE_CACHE_TIME", 15*time.Second), "how long a failed image look-up is remembered before the registry is asked again")
}

// Validate checks the options after parsing.
func (o *Options) Validate() error {
	errs := append([]error(nil), o.envErrs...)
	errs = append(errs, o.validateProcess()...)
	errs = append(errs, o.validateObjectNames()...)
	errs = append(errs, o.validateArchitectures()...)
	if p, err := registries.Parse(o.ImageRegistries); err != nil {
		errs = append(errs, fmt.Errorf("--image-registries: %w", err))
	} else {
		o.registries = p
	}
	if rules, err := decision.ParseArchitectureRules(o.ArchitectureRules); err != nil {
		errs = append(errs, fmt.Errorf("--architecture-rules: %w", err))
	} else {
		o.archRules = rules
	}
	if m, ok := annotations.ParseMode(o.DefaultMode); ok {
		o.DefaultMode = m
	} else {
		errs = append(errs, fmt.Errorf("--default-mode must be required, preferred or shadow, got %q", o.DefaultMode))
	}
	if list, err := profiles.Parse(o.RuntimeClassProfiles); err != nil {
		errs = append(errs, fmt.Errorf("--runtime-class-profiles: %w", err))
	} else {
		o.profiles = list
	}
	if o.CertSecretName != "" {
		errs = append(errs, o.validateSelfManagedCerts()...)
	} else {
		for _, name := range []string{"tls.crt", "tls.key"} {
			if _, err := os.Stat(filepath.Join(o.CertDir, name)); err != nil {
				errs = append(errs, fmt.Errorf("--cert-dir: the serving certificate must be there: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// validateProcess checks the flags of the process itself: its port,
// timings, leader election, logging, bind addresses and namespaces.
func (o *Options) validateProcess() []error {
	var errs []error
	if o.WebhookPort <= 0 || o.WebhookPort > 65535 {
		errs = append(errs, fmt.Errorf("--webhook-port must be in 1..65535, got %d", o.WebhookPort))
	}
	if o.GateTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--gate-timeout must be positive, got %s", o.GateTimeout))
	}
	if o.APICheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--api-check-interval must be positive, got %s", o.APICheckInterval))
	}
	if o.LeaseDuration <= o.RenewDeadline || o.RenewDeadline <= o.RetryPeriod || o.RetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("need --lease-duration (%s) > --renew-deadline (%s) > --retry-period (%s) > 0", o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
	}
	if o.SystemNamespace == "" || o.LeaderElectionID == "" {
		errs = append(errs, errors.New("--system-namespace and --leader-election-id must not be empty"))
	}
	switch o.LogLevel {
	case "debug", "info", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level must be debug, info or error, got %q", o.LogLevel))
	}
	if o.KubeAPIQPS >= 0 && o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst must be at least 1 with a client-side limit (--kube-api-qps %g), got %d", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	addrs := map[string]string{"--metrics-bind-address": o.MetricsBindAddress, "--health-probe-bind-address": o.HealthProbeBindAddress}
	if o.ProfilingBindAddress != "" {
		addrs["--profiling-bind-address"] = o.ProfilingBindAddress
	}
	for flagName, addr := range addrs {
		if err := checkBindAddress(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", flagName, err))
		}
	}
	errs = append(errs, o.validateExcludedNamespaces()...)
	if o.GracefulShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--graceful-shutdown-timeout must be positive, got %s", o.GracefulShutdownTimeout))
	}
	return errs
}

func (o *Options) validateExcludedNamespaces() []error {
	var errs []error
	for _, ns := range o.ExcludedNamespaces {
		if problems := validation.IsDNS1123Label(ns); len(problems) > 0 {
			errs = append(errs, fmt.Errorf("--excluded-namespaces: %q is not a namespace name: %s", ns, strings.Join(problems, "; ")))
		}
	}
	return errs
}

// validateObjectNames checks the names of the objects apportion reads and
// writes: the certificate Secret, the webhook configurations, the Service.
func (o *Options) validateObjectNames() []error {
	var errs []error
	for flagName, name := range map[string]string{"--cert-secret-name": o.CertSecretName,
		"--mutating-webhook-configuration": o.MutatingWebhookConfiguration, "--validating-webhook-configuration": o.ValidatingWebhookConfiguration} {
		if problems := validation.IsDNS1123Subdomain(name); name != "" && len(problems) > 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a valid name: %s", flagName, name, strings.Join(problems, "; ")))
		}
	}
	// A Service name is a DNS label: it becomes the first label of the
	// certificate's DNS names.
	if problems := validation.IsDNS1035Label(o.WebhookServiceName); o.WebhookServiceName != "" && len(problems) > 0 {
		errs = append(errs, fmt.Errorf("--webhook-service-name: %q is not a Service name: %s", o.WebhookServiceName, strings.Join(problems, "; ")))
	}
	return errs
}

func (o *Options) validateArchitectures() []error {
	var errs []error
	switch o.Architectures {
	case ArchitecturesOptIn, ArchitecturesAll, ArchitecturesOff:
	default:
		errs = append(errs, fmt.Errorf("--architectures must be opt-in, all or off, got %q", o.Architectures))
	}
	switch o.WebhookScope {
	case WebhookScopeAll, WebhookScopeNamespaces:
	default:
		errs = append(errs, fmt.Errorf("--webhook-scope must be all or namespaces, got %q", o.WebhookScope))
	}
	if o.ImageTimeout <= 0 || o.ImageTimeout >= o.GateTimeout {
		errs = append(errs, fmt.Errorf("--image-timeout (%s) must be positive and below --gate-timeout (%s)", o.ImageTimeout, o.GateTimeout))
	}
	if o.ImageCacheSize <= 0 {
		errs = append(errs, fmt.Errorf("--image-cache-size must be positive, got %d", o.ImageCacheSize))
	}
	if o.IfNotPresentCacheTime <= 0 {
		errs = append(errs, fmt.Errorf("--if-not-present-cache-time must be positive, got %s", o.IfNotPresentCacheTime))
	}
	if o.PullAlwaysCacheTime < 0 {
		errs = append(errs, fmt.Errorf("--pull-always-cache-time must not be negative, got %s", o.PullAlwaysCacheTime))
	}
	if o.CapacityTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--capacity-timeout must be positive, got %s", o.CapacityTimeout))
	}
	if o.CapacityTTL <= 0 || o.CapacityMaxTTL < o.CapacityTTL {
		errs = append(errs, fmt.Errorf("need 0 < --capacity-ttl (%s) <= --capacity-max-ttl (%s)", o.CapacityTTL, o.CapacityMaxTTL))
	}
	if o.DriftAfter < 0 {
		errs = append(errs, fmt.Errorf("--drift-after must not be negative, got %s", o.DriftAfter))
	}
	if o.CapacityNominationWait <= 0 {
		errs = append(errs, fmt.Errorf("--capacity-nomination-wait must be positive, got %s", o.CapacityNominationWait))
	}
	if o.CapacityDeleteQPS < 0 {
		errs = append(errs, fmt.Errorf("--capacity-delete-qps must not be negative, got %g", o.CapacityDeleteQPS))
	}
	if o.ImageFailureCacheTime <= 0 {
		errs = append(errs, fmt.Errorf("--image-failure-cache-time must be positive, got %s", o.ImageFailureCacheTime))
	}
	return errs
}

// validateSelfManagedCerts checks what --cert-secret-name needs. The cert dir
// need not hold a certificate yet, but the process must be able to write
// there: it is created when missing, as the rotator would.
func (o *Options) validateSelfManagedCerts() []error {
	var errs []error
	if o.WebhookServiceName == "" {
		errs = append(errs, errors.New("--webhook-service-name is required with --cert-secret-name"))
	}
	if o.CertRenewBefore <= 0 || o.CertRenewBefore >= o.CertValidity || o.CertValidity > o.CAValidity {
		errs = append(errs, fmt.Errorf("need 0 < --cert-renew-before (%s) < --cert-validity (%s) <= --ca-validity (%s)", o.CertRenewBefore, o.CertValidity, o.CAValidity))
	}
	if err := checkWritable(o.CertDir); err != nil {
		errs = append(errs, fmt.Errorf("--cert-dir must be writable with --cert-secret-name: %w", err))
	}
	return errs
}

func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return err
	}
	_ = f.Close()
	return os.Remove(f.Name())
}

// checkBindAddress accepts "0" (disabled) or host:port with a port in 0..65535.
func checkBindAddress(addr string) error {
	if addr == "0" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port or \"0\" to disable, got %q", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port must be in 0..65535, got %q", port)
	}
	return nil
}

// Excluded is the set of namespaces never mutated, the system namespace
// included.
func (o *Options) Excluded() []string {
	return append(append([]string(nil), o.ExcludedNamespaces...), o.SystemNamespace)
}

// Registries is the policy of --image-registries; valid after Validate.
func (o *Options) Registries() *registries.Policy { return o.registries }

// ArchRules is --architecture-rules by architecture (nil when none); valid
// after Validate.
func (o *Options) ArchRules() decision.ArchitectureRules { return o.archRules }

// Profiles returns the runtime-class profiles by runtimeClassName (nil when
// none); valid after Validate.
func (o *Options) Profiles() map[string]profiles.Profile {
	if len(o.profiles) == 0 {
		return nil
	}
	out := make(map[string]profiles.Profile, len(o.profiles))
	for _, p := range o.profiles {
		out[p.RuntimeClassName] = p
	}
	return out
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

// envParse reads key with parse, or returns def when unset; a value that
// does not parse is kept as an error for Validate.
func envParse[T any](o *Options, key string, def T, parse func(string) (T, error)) T {
	raw, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	v, err := parse(raw)
	if err != nil {
		o.envErrs = append(o.envErrs, fmt.Errorf("environment variable %s=%q: %w", key, raw, err))
		return def
	}
	return v
}

func (o *Options) envInt(key string, def int) int { return envParse(o, key, def, strconv.Atoi) }

func (o *Options) envBool(key string, def bool) bool { return envParse(o, key, def, strconv.ParseBool) }

func (o *Options) envFloat(key string, def float64) float64 {
	return envParse(o, key, def, func(v string) (float64, error) { return strconv.ParseFloat(v, 64) })
}

func (o *Options) envDuration(key string, def time.Duration) time.Duration {
	return envParse(o, key, def, time.ParseDuration)
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
