package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

const releaseGatesLong = `Removes apportion's scheduling gate (` + annotations.PlacementGate + `) from every pod that
still holds it, keeping the pods' other gates: pods left waiting when apportion was
uninstalled or stopped before it released them (its gate janitor releases a pod held
too long). Needs list and patch on pods.

Acts on the pods of one namespace: -n, else the kubeconfig context's namespace, else
"default"; -A for every namespace.

Prints "released N pod(s) (M failed)", with --dry-run "would release N pod(s) (dry run)";
when the pods cannot be listed (the cluster unreachable, list refused), the error alone,
after the pods already released if any. Exit status 0 when every pod was released, 1
when some were not or the pods could not be listed (one line each on stderr), 2 on bad
usage.`

const releaseGatesExample = `  # Count the gated pods of one namespace, changing nothing
  apportion release-gates -n shop --dry-run

  # Release every gated pod of the cluster
  apportion release-gates -A`

const (
	// listPageSize bounds each List response: the command sees every pod
	// of the cluster, and a single unpaginated List of them all is a heavy
	// request for the API server.
	listPageSize = 500
	// releaseAttempts bounds re-reads of a pod whose gates changed under us.
	releaseAttempts = 5
)

func newReleaseGates() *cobra.Command {
	kf := newKubeFlags()
	var all, dryRun bool
	cmd := &cobra.Command{
		Use:     "release-gates [-n NAMESPACE | -A] [--dry-run]",
		Short:   "Remove apportion's scheduling gate from every pod that still holds it",
		Long:    releaseGatesLong,
		Example: releaseGatesExample,
		Args:    noArgs,
		// The flags are in Use already.
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReleaseGates(kf, all, dryRun, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	kf.add(fs)
	addAllNamespaces(fs, &all, "the pods of every namespace")
	fs.BoolVar(&dryRun, "dry-run", false, "count the pods that hold the gate; change nothing")
	return cmd
}

// runReleaseGates runs `apportion release-gates`.
func runReleaseGates(kf *kubeFlags, all, dryRun bool, stdout, stderr io.Writer) error {
	cfg, namespace, err := kf.connect(all)
	if err != nil {
		return err
	}
	// controller-runtime's client logs through its global logger, which
	// prints a warning of its own when none is set.
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	c, err := newClient(cfg, client.Options{})
	if err != nil {
		return failed(fmt.Errorf("creating the client: %w", err))
	}
	ctx, stop := signalContext()
	defer stop()
	if code := releaseGates(ctx, c, namespace, dryRun, stdout, stderr); code != ExitOK {
		return &silentExit{code}
	}
	return nil
}

// releaseGates lists pods page by page and releases each gated one as it
// goes.
func releaseGates(ctx context.Context, c client.Client, namespace string, dryRun bool, stdout, stderr io.Writer) int {
	var released, failed int
	opts := []client.ListOption{client.Limit(listPageSize)}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	var listErr error
	restarts := 0
	for cont := ""; ; {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, append(opts, client.Continue(cont))...); err != nil {
			// A continue token expires after a few minutes; starting over
			// is safe, since released pods no longer match.
			if apierrors.IsResourceExpired(err) && cont != "" && restarts < 3 {
				restarts++
				cont = ""
				continue
			}
			listErr = err
			break
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if gateIndex(pod) < 0 {
				continue
			}
			if dryRun {
				released++
				continue
			}
			ok, err := releaseGate(ctx, c, pod)
			switch {
			case err != nil:
				failed++
				fmt.Fprintf(stderr, "%s release-gates: %s/%s: %v\n", Program, pod.Namespace, pod.Name, err)
			case ok:
				released++
			}
		}
		if cont = pods.Continue; cont == "" {
			break
		}
	}
	if listErr != nil {
		fmt.Fprintf(stderr, "%s release-gates: listing pods: %v\n", Program, listErr)
	}
	switch {
	case listErr != nil && (dryRun || released+failed == 0):
		// The error alone: a count of the pods listed before it would
		// read as the result.
	case dryRun:
		fmt.Fprintf(stdout, "would release %d pod(s) (dry run)\n", released)
	default:
		fmt.Fprintf(stdout, "released %d pod(s) (%d failed)\n", released, failed)
	}
	if failed > 0 || listErr != nil {
		return ExitFailure
	}
	return ExitOK
}

// releaseGate removes the gate with a JSON patch that first tests the gate's
// name at its index: if the gates changed since the pod was read, the API
// server rejects the patch (Conflict, or Invalid for the failed test) instead
// of removing another gate, and the pod is read again, at once: the re-read
// is what resolves it, not waiting. It reports false with no error when the
// pod or its gate is already gone.
func releaseGate(ctx context.Context, c client.Client, pod *corev1.Pod) (bool, error) {
	released, reread := false, false
	err := retry.OnError(wait.Backoff{Steps: releaseAttempts}, gatesChanged, func() error {
		if reread {
			fresh, err := getPod(ctx, c, pod.Namespace, pod.Name)
			if err != nil {
				return fmt.Errorf("reading the pod again: %w", err)
			} else if fresh == nil {
				return nil
			}
			pod = fresh
		}
		reread = true
		i := gateIndex(pod)
		if i < 0 {
			return nil
		}
		path := fmt.Sprintf("/spec/schedulingGates/%d", i)
		patch, err := json.Marshal([]jsonpatch.Operation{
			jsonpatch.NewOperation("test", path+"/name", annotations.PlacementGate),
			jsonpatch.NewOperation("remove", path, nil),
		})
		if err != nil {
			return err
		}
		err = c.Patch(ctx, pod, client.RawPatch(types.JSONPatchType, patch))
		switch {
		case err == nil:
			released = true
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("removing the scheduling gate: %w", err)
		}
		return nil
	})
	return released, err
}

// gatesChanged tells the patch rejected because the pod's gates changed
// since it was read.
func gatesChanged(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err)
}

// getPod reads one pod with a List by name, so that the command needs no
// get permission; nil when it is gone.
func getPod(ctx context.Context, c client.Reader, namespace, name string) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingFields{"metadata.name": name}); err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		return nil, nil
	}
	return &pods.Items[0], nil
}

func gateIndex(pod *corev1.Pod) int {
	return slices.IndexFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == annotations.PlacementGate
	})
}
