package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/apportion-dev/apportion/pkg/controllers"
	"github.com/apportion-dev/apportion/pkg/operator"
	"github.com/apportion-dev/apportion/pkg/options"
	"github.com/apportion-dev/apportion/pkg/version"
	"github.com/apportion-dev/apportion/pkg/webhook"
)

const webhookUsage = `Usage: apportion webhook [flags]

Serves the admission webhooks (pod mutator, workload and PlacementPolicy
validators) and runs the controllers until SIGINT or SIGTERM: placement,
capacity fallback, deletion cost, PlacementPolicy status (when its CRD is
installed) and rebalance (--rebalance) on the leader; the gate janitor and
the certificate rotator (--cert-secret-name) on every replica. Every flag can
also be set by an environment variable: its name in UPPER_SNAKE_CASE
(--gate-timeout -> GATE_TIMEOUT); a flag wins over the variable.

`

// Webhook runs `apportion webhook` until SIGINT/SIGTERM.
func Webhook(args []string, stdout, stderr io.Writer) int {
	var o options.Options
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	config.RegisterFlags(fs) // --kubeconfig, read by ctrl.GetConfig
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, webhookUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return ExitOK
		}
		fmt.Fprintf(stderr, "apportion webhook: %v (see apportion webhook -h)\n", err)
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "apportion webhook: unexpected argument %q\n", fs.Arg(0))
		return ExitUsage
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "apportion webhook: %v\n", err)
		return ExitUsage
	}
	// The kubeconfig is loaded before the logger is set, so that a missing
	// one is reported in the one line below rather than also as
	// controller-runtime's logged stack trace.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintf(stderr, "apportion webhook: loading kubeconfig (--kubeconfig, $KUBECONFIG, in-cluster or ~/.kube/config): %v\n", err)
		return ExitUsage
	}
	level := map[string]zapcore.Level{"debug": zapcore.DebugLevel, "info": zapcore.InfoLevel, "error": zapcore.ErrorLevel}[o.LogLevel]
	logger := zap.New(zap.WriteTo(stdout), zap.Level(level))
	ctrl.SetLogger(logger)
	ctx := log.IntoContext(ctrl.SetupSignalHandler(), logger)
	logger.Info("apportion webhook", "version", version.String())
	if err := runWebhook(ctx, cfg, &o); err != nil {
		logger.Error(err, "webhook stopped")
		return ExitFailure
	}
	return ExitOK
}

// runWebhook wires the operator, the controllers and the admission webhooks, and
// blocks until ctx ends.
func runWebhook(ctx context.Context, cfg *rest.Config, o *options.Options) error {
	op, err := operator.NewOperator(ctx, cfg, o)
	if err != nil {
		return err
	}
	cs := controllers.NewControllers(ctx, op.Manager, o, controllers.Dependencies{
		Clock: op.Clock, Recorder: op.Recorder, APIs: op.APIs, Signer: op.Signer,
		Policies: op.Policies, PullSecrets: op.PullSecrets,
	})
	if err := op.WithControllers(ctx, cs...); err != nil {
		return err
	}
	op.WithWebhooks(webhook.Handlers(webhook.Config{
		Reader: op.GetClient(), Clock: op.Clock, Recorder: op.Recorder, Policies: op.Policies.OrNil(), Options: o,
	}))
	return op.Start(ctx)
}
