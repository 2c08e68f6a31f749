// Package operator builds what `apportion webhook` runs on: the
// controller-runtime manager with its informer caches (cache.go: what each
// keeps, the informers started before the manager, the field indexes), the
// discovery watch of optional APIs (apiwatch.go), the certificate rotator,
// the webhook server that starts after its certificate and drains before it
// stops (webhookserver.go, drain.go), the decision signer, and the health
// and readiness checks (health.go). The controllers come from
// pkg/controllers.NewControllers and the admission handlers from
// pkg/webhook.Handlers; cmd wires the three together.
package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"time"

	"github.com/awslabs/operatorpkg/controller"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/certs"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/events"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/policy"
	"github.com/apportion-dev/apportion/pkg/version"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Scheme holds the built-in kinds, apportion's and Karpenter's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	gv := capacity.NodePoolGVK.GroupVersion()
	s.AddKnownTypes(gv, &karpv1.NodePool{}, &karpv1.NodePoolList{}, &karpv1.NodeClaim{}, &karpv1.NodeClaimList{})
	metav1.AddToGroupVersion(s, gv)
	return s, nil
}

// Operator is the manager and what every controller and webhook shares.
type Operator struct {
	manager.Manager

	Options  *options.Options
	Clock    clock.Clock
	Recorder *events.Recorder
	// APIs tells which optional APIs are served; when one comes or goes the
	// process ends, so that the restart adapts.
	APIs   *APIWatch
	Signer *decision.Signer
	// Policies reads PlacementPolicies; nil without their CRD.
	Policies *policy.Source
	// PullSecrets reads image pull secrets; nil unless --read-pull-secrets.
	PullSecrets kubernetes.Interface
	// Lease is the placement Lease's lock; nil without leader election.
	Lease *LeaseLock

	server *startAfter
	drain  *drain
}

// NewOperator builds the manager, starts the caches' informers and the
// certificate rotator, and loads the decision key. Nothing runs until Start.
func NewOperator(ctx context.Context, cfg *rest.Config, o *options.Options) (*Operator, error) {
	op := &Operator{Options: o, Clock: clock.RealClock{}, drain: newDrain(clock.RealClock{})}
	mgr, err := op.newManager(cfg)
	if err != nil {
		return nil, err
	}
	op.Manager = mgr
	metrics.Register()
	op.Recorder = events.NewRecorder(mgr.GetEventRecorder("apportion"))
	if err := op.addCertRotator(); err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the discovery client: %w", err)
	}
	op.APIs, err = NewAPIWatch(dc, o.APICheckInterval, capacity.NodePoolGVK, workload.ReplicaSetGVK, workload.DeploymentGVK, workload.StatefulSetGVK, workload.RolloutGVK, workload.JobGVK, workload.CronJobGVK, workload.WorkflowGVK, v1alpha1.PlacementPolicyGVK, v1alpha1.ClusterPlacementPolicyGVK)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(op.APIs); err != nil {
		return nil, err
	}
	if op.Policies, err = startInformers(ctx, mgr, op.APIs, o); err != nil {
		return nil, err
	}
	if op.Signer, err = loadSigner(ctx, o); err != nil {
		return nil, err
	}
	op.PullSecrets, err = pullSecretsClient(o, func() (kubernetes.Interface, error) { return kubernetes.NewForConfig(cfg) })
	if err != nil {
		return nil, err
	}
	if o.PodName != "" {
		// Drain as soon as this replica's pod is being deleted: during
		// its preStop sleep, before SIGTERM.
		if err := mgr.Add(&ownPod{reader: mgr.GetClient(), drain: op.drain, clk: clock.RealClock{}, interval: 500 * time.Millisecond,
			key: client.ObjectKey{Namespace: o.SystemNamespace, Name: o.PodName}}); err != nil {
			return nil, err
		}
	}
	return op, nil
}

func (op *Operator) newManager(cfg *rest.Config) (manager.Manager, error) {
	o := op.Options
	scheme, err := Scheme()
	if err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	tlsMin := func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }
	// HTTP/1.1 only: a draining replica retires each connection with
	// "Connection: close" (see drain), which HTTP/2 has no per-response
	// way to do; it also keeps HTTP/2's rapid-reset attacks out.
	http1Only := func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
	op.server = &startAfter{Server: webhook.NewServer(webhook.Options{
		Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir,
		TLSOpts: []func(*tls.Config){tlsMin, http1Only},
	}), drain: op.drain}
	leaseDuration, renewDeadline, retryPeriod, grace := o.LeaseDuration, o.RenewDeadline, o.RetryPeriod, o.GracefulShutdownTimeout
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.KubeAPIQPS), o.KubeAPIBurst
	// The API server names the field manager of every write after the user
	// agent: "apportion" whatever the binary is called, so that a pod's
	// managedFields tell apportion's deletion costs from another writer's.
	cfg.UserAgent = decision.FieldManager + "/" + version.Version
	// The Lease's lock is built here rather than by controller-runtime so
	// that the placement controller can read when this replica last
	// renewed it.
	var lock resourcelock.Interface
	if o.LeaderElect {
		if op.Lease, err = newLeaseLock(cfg, o, op.Clock); err != nil {
			return nil, err
		}
		lock = op.Lease
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOptions(o),
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		PprofBindAddress:              o.ProfilingBindAddress,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.SystemNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		GracefulShutdownTimeout:       &grace,
		WebhookServer:                 op.server,
		Cache:                         CacheOptions(o),

		// The lock is named as above; the durations still drive the elector.
		LeaderElectionResourceLockInterface: lock,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if op.Lease != nil {
		op.Lease.withEvents(mgr.GetEventRecorderFor(op.Lease.Identity())) //nolint:staticcheck // the lock records core/v1 Events, as controller-runtime's own does
	}
	return mgr, nil
}

// metricsOptions serves /metrics in plain HTTP, or with --metrics-secure
// over HTTPS to callers the API server authenticates and authorizes, as
// kubebuilder's default does. The reviews' answers are cached (a minute for
// a token, minutes for a decision), so a scrape every few seconds costs the
// API server little.
func metricsOptions(o *options.Options) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.MetricsBindAddress}
	if o.MetricsSecure {
		opts.SecureServing = true
		opts.FilterProvider = metricsFilter
		// HTTP/2 off, as for the webhook server: no rapid-reset attacks on
		// an endpoint anyone who reaches the port may call.
		opts.TLSOpts = []func(*tls.Config){
			func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 },
			func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} },
		}
	}
	return opts
}

// addCertRotator runs the certificate rotator on every replica when
// apportion manages its own certificates; the webhook server starts once the
// first certificate is written.
func (op *Operator) addCertRotator() error {
	o := op.Options
	if o.CertSecretName == "" {
		return nil
	}
	rotator := certs.NewRotator(op.Clock, op.GetAPIReader(), op.GetClient(), certs.Config{
		Namespace: o.SystemNamespace, SecretName: o.CertSecretName, ServiceName: o.WebhookServiceName,
		CertDir:                        o.CertDir,
		MutatingWebhookConfiguration:   o.MutatingWebhookConfiguration,
		ValidatingWebhookConfiguration: o.ValidatingWebhookConfiguration,
		CAValidity:                     o.CAValidity, CertValidity: o.CertValidity, RenewBefore: o.CertRenewBefore,
	})
	if err := op.Add(rotator); err != nil {
		return fmt.Errorf("adding the certificate rotator: %w", err)
	}
	op.server.ready = rotator.Ready()
	return nil
}

// loadSigner reads the decision key; without one, decisions are signed with
// a key of this process only.
func loadSigner(ctx context.Context, o *options.Options) (*decision.Signer, error) {
	if o.DecisionKeyFile == "" {
		log.FromContext(ctx).Info("no --decision-key-file: decisions are signed with a key of this process only; capacity fallback ignores pods placed by other replicas or earlier runs")
		return decision.RandomSigner(), nil
	}
	return decision.LoadSigner(o.DecisionKeyFile)
}

// WithControllers registers the controllers with the manager.
func (op *Operator) WithControllers(ctx context.Context, cs ...controller.Controller) error {
	for _, c := range cs {
		if err := c.Register(ctx, op.Manager); err != nil {
			return fmt.Errorf("registering controller %T: %w", c, err)
		}
	}
	return nil
}

// WithWebhooks serves the admission handlers by path, each behind the drain
// (a draining replica closes connections so that clients move on).
func (op *Operator) WithWebhooks(hooks map[string]admission.Handler) {
	for path, h := range hooks {
		op.GetWebhookServer().Register(path, op.drain.handler(&webhook.Admission{Handler: h}))
	}
}

// Start adds the health and readiness checks and runs the manager until ctx
// ends.
func (op *Operator) Start(ctx context.Context) error {
	if err := op.addHealthChecks(); err != nil {
		return err
	}
	o := op.Options
	hostname, _ := os.Hostname()
	log.FromContext(ctx).Info("starting", "identity", hostname, "leaderElection", o.LeaderElect, "gateTimeout", o.GateTimeout.String(),
		"certSecret", o.CertSecretName, "architectures", o.Architectures, "imageTimeout", o.ImageTimeout.String())
	return op.Manager.Start(ctx)
}
