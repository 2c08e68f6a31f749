package workload

import (
	"context"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Verdict is what admission does with a pod being created (Classify).
type Verdict uint8

const (
	// Skip: the pod is left alone; Class.Skipped says why.
	Skip Verdict = iota
	// Hold: the pod is held by the placement gate for the placement
	// leader; Class.Basis says on what grounds.
	Hold
	// Shadow: the pod is in shadow mode; the placement leader decides it
	// without holding or changing it.
	Shadow
	// Invalid: the strategy that applies does not parse (Class.Invalid);
	// the pod is placed without apportion.
	Invalid
	// Failed: the owner chain could not be read (Class.Err).
	Failed
)

// SkipReason says why a pod is left alone.
type SkipReason uint8

const (
	// NotSkipped: the verdict is not Skip.
	NotSkipped SkipReason = iota
	// SkipMirror: a static pod's mirror.
	SkipMirror
	// SkipScheduled: the pod has a nodeName already.
	SkipScheduled
	// SkipDaemonSet: an apps/v1 DaemonSet controls the pod.
	SkipDaemonSet
	// SkipGated: the pod carries the placement gate already (a
	// reinvocation of the webhook).
	SkipGated
	// SkipOptedOut: apportion.dev/skip on the pod or its workload, and
	// no cluster policy refuses it.
	SkipOptedOut
	// SkipNoStrategy: no strategy applies (or the pod's owner is not one
	// apportion follows) and the pod is not placed by architecture.
	SkipNoStrategy
)

// Basis says on what grounds a pod is held (or decided in shadow mode).
type Basis uint8

const (
	// BasisStrategy: its workload's strategy, valid.
	BasisStrategy Basis = iota + 1
	// BasisArchitecture: no strategy; placed by architecture alone.
	BasisArchitecture
	// BasisNotCached: its owner is not cached yet; the placement leader,
	// which waits for its cache, decides or releases it.
	BasisNotCached
)

// ArchitecturePlacement is which pods without a strategy Classify places
// by architecture alone (--architectures).
type ArchitecturePlacement uint8

const (
	// ArchitectureNever: none (--architectures=off; the default).
	ArchitectureNever ArchitecturePlacement = iota
	// ArchitectureOptIn: those whose pod template or workload is
	// annotated, or namespace labelled, apportion.dev/architectures: auto.
	ArchitectureOptIn
	// ArchitectureAlways: every one (--architectures=all).
	ArchitectureAlways
)

// Class is the answer of Classify: what admission does with a pod.
type Class struct {
	Verdict Verdict
	// Skipped is why the pod is left alone (Verdict Skip).
	Skipped SkipReason
	// Basis and Mode are why and how the pod is placed (Verdict Hold or
	// Shadow): Mode is the resolved workload's, or, for a pod without
	// one (bare, or its owner not cached yet), its own apportion.dev/mode
	// (its template's), else the default.
	Basis Basis
	Mode  string
	// Info is the pod's workload as resolved; nil when the pod was
	// skipped before resolution, has no workload apportion follows, or
	// its owner is not cached yet.
	Info *Info
	// Problems are the workload's apportion.dev/* annotations not taken
	// as written (Info.Problems), whatever the verdict: the webhook warns
	// about them.
	Problems []annotations.Problem
	// Invalid is why the strategy does not parse (Verdict Invalid). With
	// Info, the strategy is Info.Strategy, from Info.Source; without, it
	// is the pod template's (owner not cached yet).
	Invalid error
	// Err is why the owner chain could not be read (Verdict Failed).
	Err error
}

// hold makes c a Hold in mode, or a Shadow in shadow mode.
func (c *Class) hold(basis Basis, mode string) {
	c.Verdict, c.Basis, c.Mode = Hold, basis, mode
	if mode == annotations.ModeShadow {
		c.Verdict = Shadow
	}
}

// SkipGuard is a PolicySource that knows whether some policy does not let
// workloads opt out with apportion.dev/skip (a ClusterPlacementPolicy with
// allowSkip: false).
type SkipGuard interface {
	SkipMayBeRefused(ctx context.Context) bool
}

// WithArchitectures is which pods without a strategy Classify places by
// architecture alone (ArchitectureNever without it).
func WithArchitectures(a ArchitecturePlacement) Option {
	return func(o *resolveOptions) { o.architectures = a }
}

// WithStrategyCheck is how Classify checks a strategy: check returns why
// raw does not parse, nil when it does (the pod webhook's is strategy.Parse
// behind its cache). Without it, Classify calls strategy.Parse. Classify
// checks at most one strategy per pod.
func WithStrategyCheck(check func(raw string) error) Option {
	return func(o *resolveOptions) { o.check = check }
}

// Classify answers, for a pod being created in namespace, what the pod
// webhook does with it, reading each object of its owner chain once from
// r (a metadata cache) and its namespace only for an architecture opt-in
// the pod and its workload do not answer. Mirror pods, pods with a
// nodeName, DaemonSet pods and pods gated already are skipped before
// anything is read. A pod without a workload apportion follows opts out by
// its own apportion.dev/skip, else is placed by architecture or skipped. A
// workload's pod is resolved as Resolve does (opts: WithDefaultMode,
// WithPolicies), then skipped when it opts out, placed by architecture
// when it has no strategy (WithArchitectures), invalid when its strategy
// does not parse (WithStrategyCheck), held otherwise, or in shadow mode.
// When its owner is not cached yet, the pod's own annotations decide:
// skipped when it opts out and no policy may refuse that (SkipGuard),
// invalid when its template's strategy does not parse, held otherwise
// (BasisNotCached). A pod held in shadow mode is a Shadow. Excluded
// namespaces are the caller's.
func Classify(ctx context.Context, r client.Reader, namespace string, pod *corev1.Pod, opts ...Option) Class {
	owner := metav1.GetControllerOfNoCopy(pod)
	switch {
	case pod.Annotations[corev1.MirrorPodAnnotationKey] != "":
		return Class{Skipped: SkipMirror}
	case pod.Spec.NodeName != "":
		return Class{Skipped: SkipScheduled}
	case Is(owner, DaemonSetGVK):
		return Class{Skipped: SkipDaemonSet}
	case gated(pod):
		return Class{Skipped: SkipGated}
	}
	var o resolveOptions
	for _, opt := range opts {
		opt(&o)
	}
	var c Class
	if ownerKey(pod, owner) == "" {
		// A bare pod, or one of an owner not followed: no strategy
		// applies, but placement by architecture may. The skip of a pod
		// with a workload is the resolution's: a cluster policy may not
		// allow it. (Here, unlike there, the value is not trimmed.)
		switch {
		case strings.EqualFold(pod.Annotations[annotations.Skip], "true"):
			c.Skipped = SkipOptedOut
		case !o.byArchitecture(ctx, r, namespace, pod, nil):
			c.Skipped = SkipNoStrategy
		default:
			c.hold(BasisArchitecture, o.podMode(pod))
		}
		return c
	}
	info, err := o.resolvePod(ctx, r, namespace, pod, owner)
	switch {
	case errors.Is(err, ErrNotCached):
		return o.notCached(ctx, pod)
	case err != nil:
		return Class{Verdict: Failed, Err: err}
	case info == nil:
		return Class{Skipped: SkipNoStrategy}
	}
	c.Info, c.Problems = info, info.Problems
	switch {
	case info.Skip:
		c.Skipped = SkipOptedOut
	case !info.Found && !o.byArchitecture(ctx, r, namespace, pod, info):
		c.Skipped = SkipNoStrategy
	case !info.Found:
		c.hold(BasisArchitecture, info.Mode)
	default:
		if err := o.checkStrategy(info.Strategy); err != nil {
			c.Verdict, c.Invalid = Invalid, err
			return c
		}
		c.hold(BasisStrategy, info.Mode)
	}
	return c
}

// notCached classifies a pod whose owner (a brand-new ReplicaSet, say) the
// cache has not seen yet, from its own annotations: held, for the placement
// leader to decide or release; unless it opts out (and no cluster policy
// may refuse that), its template's strategy does not parse, or its mode is
// shadow. The workload's own mode is not known yet: the pod template's,
// else the default, says (a pod held whose workload turns out to be in
// shadow mode is released with its shadow decision).
func (o *resolveOptions) notCached(ctx context.Context, pod *corev1.Pod) Class {
	if isTrue(pod.Annotations[annotations.Skip]) && !o.skipMayBeRefused(ctx) {
		return Class{Skipped: SkipOptedOut}
	}
	if raw, _, ok := strategy.Find(nil, pod.Annotations); ok {
		if err := o.checkStrategy(raw); err != nil {
			return Class{Verdict: Invalid, Invalid: err}
		}
	}
	var c Class
	c.hold(BasisNotCached, o.podMode(pod))
	return c
}

// skipMayBeRefused reports whether an opted-out pod whose workload is not
// known yet must be held all the same: some cluster policy does not let its
// workloads opt out, and the placement leader, which waits for its cache,
// decides.
func (o *resolveOptions) skipMayBeRefused(ctx context.Context) bool {
	g, ok := o.policies.(SkipGuard)
	return ok && g.SkipMayBeRefused(ctx)
}

// podMode is the mode of a pod whose workload is not known: its own
// apportion.dev/mode (its template's), else the default.
func (o *resolveOptions) podMode(pod *corev1.Pod) string {
	return annotations.FirstMode(pod.Annotations[annotations.Mode], o.defaultMode)
}

// byArchitecture reports whether a pod without a strategy is placed by
// architecture (info is its workload, nil for a bare pod).
func (o *resolveOptions) byArchitecture(ctx context.Context, r client.Reader, namespace string, pod *corev1.Pod, info *Info) bool {
	switch o.architectures {
	case ArchitectureAlways:
		return true
	case ArchitectureOptIn:
		return ArchitecturesOptedIn(ctx, r, namespace, pod, info)
	}
	return false
}

// checkStrategy is why raw does not parse, nil when it does.
func (o *resolveOptions) checkStrategy(raw string) error {
	if o.check != nil {
		return o.check(raw)
	}
	_, err := strategy.Parse(raw)
	return err
}

// gated reports whether the pod carries apportion's placement gate.
func gated(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == annotations.PlacementGate {
			return true
		}
	}
	return false
}
