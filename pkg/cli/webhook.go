package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/apportion-dev/apportion/pkg/controllers"
	"github.com/apportion-dev/apportion/pkg/internal/lazylog"
	"github.com/apportion-dev/apportion/pkg/lease"
	"github.com/apportion-dev/apportion/pkg/operator"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/version"
	"github.com/apportion-dev/apportion/pkg/webhook"
)

const webhookLong = `Serves the admission webhooks (pod mutator, workload and PlacementPolicy validators) and
runs the controllers until SIGINT or SIGTERM: placement, capacity fallback, deletion cost,
PlacementPolicy status (when its CRD is installed) and rebalance (--rebalance) on the
leader; the gate janitor and the certificate rotator (--cert-secret-name) on every
replica. Every flag can also be set by an environment variable: its name in
UPPER_SNAKE_CASE (--gate-timeout -> GATE_TIMEOUT); a flag wins over the variable.`

const webhookExample = `  # Locally, against the cluster of the current kubeconfig context
  apportion webhook --webhook-host=127.0.0.1 --cert-dir=./certs --leader-elect=false`

func newWebhook() *cobra.Command {
	var o options.Options
	cmd := &cobra.Command{
		Use:     "webhook [flags]",
		Short:   "Serve admission and run the placement controllers",
		Long:    webhookLong,
		Example: webhookExample,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(&o, cmd.OutOrStdout())
		},
	}
	// The options are Go flags (pkg/options), taken over as pflags.
	gofs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	o.AddFlags(gofs)
	config.RegisterFlags(gofs) // --kubeconfig, read by ctrl.GetConfig
	cmd.Flags().AddGoFlagSet(gofs)
	return cmd
}

// serve runs `apportion webhook` until SIGINT/SIGTERM.
func serve(o *options.Options, stdout io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	// The kubeconfig is loaded before the logger is set, so that a missing
	// one is reported in the one line below rather than also as
	// controller-runtime's logged stack trace.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig (--kubeconfig, $KUBECONFIG, in-cluster or ~/.kube/config): %w", err)
	}
	level := map[string]zapcore.Level{"debug": zapcore.DebugLevel, "info": zapcore.InfoLevel, "error": zapcore.ErrorLevel}[o.LogLevel]
	logger := lazylog.New(zap.New(zap.WriteTo(stdout), zap.Level(level)))
	ctrl.SetLogger(logger)
	ctx := log.IntoContext(ctrl.SetupSignalHandler(), logger)
	logger.Info("apportion webhook", "version", version.String())
	if err := runWebhook(ctx, cfg, o); err != nil {
		logger.Error(err, "webhook stopped")
		return &silentExit{ExitFailure}
	}
	return nil
}

// runWebhook wires the operator, the controllers and the admission webhooks, and
// blocks until ctx ends.
func runWebhook(ctx context.Context, cfg *rest.Config, o *options.Options) error {
	op, err := operator.NewOperator(ctx, cfg, o)
	if err != nil {
		return err
	}
	deps := controllers.Dependencies{
		Clock: op.Clock, Recorder: op.Recorder, APIs: op.APIs, Signer: op.Signer,
		Policies: op.Policies, PullSecrets: op.PullSecrets,
	}
	if op.Lease != nil { // no typed nil in the interface
		deps.Lease = op.Lease
		// The placement Lease as its informer shows it: read by the
		// placement controller, the gate janitor and every admission.
		deps.LeaseWatch = lease.NewWatch(client.ObjectKey{Namespace: o.SystemNamespace, Name: o.LeaderElectionID})
		// Ready once the Lease's first listing reached the Watch: before,
		// an admission would find no leader and leave its pod ungated.
		if err := op.AddReadyzCheck("placement-lease", deps.LeaseWatch.Ready); err != nil {
			return fmt.Errorf("adding the placement Lease's readiness check: %w", err)
		}
	}
	cs := controllers.NewControllers(ctx, op.Manager, o, deps)
	if err := op.WithControllers(ctx, cs...); err != nil {
		return err
	}
	op.WithWebhooks(webhook.Handlers(webhook.Config{
		Reader: op.GetClient(), Writer: op.GetClient(), Clock: op.Clock, Recorder: op.Recorder, Policies: op.Policies.OrNil(), Clusters: op.Policies,
		Lease: deps.LeaseWatch, Options: o,
	}))
	return op.Start(ctx)
}
