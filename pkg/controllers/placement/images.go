package placement

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/imagearch"
	"github.com/apportion-dev/apportion/pkg/strategy"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Images tells which architectures a pod's images run on (pkg/imagearch).
type Images interface {
	Pod(ctx context.Context, pod *corev1.Pod) (*imagearch.Result, error)
}

// WithImages makes the controller inspect the images of every pod it places,
// waiting at most timeout for them; pods without a strategy are then placed
// by architecture alone (the webhook gates them only when asked to).
func (c *Controller) WithImages(images Images, timeout time.Duration) *Controller {
	c.images, c.imageWait = images, timeout
	return c
}

// ArchitecturesForAll places every gated pod without a strategy by
// architecture (--architectures=all). Without it, only the pods whose
// template, workload or namespace opted in with apportion.dev/architectures:
// auto are; the others are released unchanged, whatever gated them.
func (c *Controller) ArchitecturesForAll(all bool) *Controller {
	c.archForAll = all
	return c
}

// WithArchitectureRules adds, to every decision, the tolerations and the
// required node labels of the rules of the architectures it allows
// (--architecture-rules). The operator sets them in node-label mode only:
// with Karpenter, a NodePool's own opt-in (apportion.dev/tolerate) decides
// which taints a pod gains.
func (c *Controller) WithArchitectureRules(rules decision.ArchitectureRules) *Controller {
	c.archRules = rules
	return c
}

// addArchitectureRules adds the rules of d's architectures to d; none when
// the architectures are unknown.
func (c *Controller) addArchitectureRules(d *decision.Decision) {
	if len(c.archRules) == 0 || len(d.Architectures) == 0 {
		return
	}
	tolerations, labels := c.archRules.For(d.Architectures)
	d.Tolerations = append(d.Tolerations, tolerations...)
	d.NodeLabels = labels
}

// byArchitecture reports whether a gated pod without a strategy is placed
// by architecture. The gate alone does not say so: the webhook gates the
// pods of a ReplicaSet its cache has not seen yet before it knows whether
// the workload asked for anything.
func (c *Controller) byArchitecture(ctx context.Context, pod *corev1.Pod, info *workload.Info) bool {
	if c.images == nil {
		return false
	}
	return c.archForAll || workload.ArchitecturesOptedIn(ctx, c.kubeClient, pod.Namespace, pod, info)
}

// placeByArchitecture places a pod without a strategy: a required
// kubernetes.io/arch In [the architectures its images share], and the
// tolerations of the first NodePool (in Karpenter's order) that can run one of
// them when its operator opted it in. No NodePool is pinned: Karpenter picks
// among its pools, falling back by weight as it does for any pod, so capacity
// fallback is Karpenter's own for these pods. Any failure releases the pod
// unconstrained. In shadow mode the decision is recorded, not applied.
func (c *Controller) placeByArchitecture(ctx context.Context, pod *corev1.Pod, ref *corev1.ObjectReference, shadow bool) (reconcile.Result, error) {
	res, err := c.inspect(ctx, pod)
	if err != nil {
		c.warnEvery(ref, "ImageInspectionFailed", "%v; pods are placed without an architecture constraint", err)
		return c.release(ctx, pod, ReasonImageError, nil)
	}
	if len(res.Architectures) == 0 {
		c.warnOnce(ref, "NoCompatibleArchitecture", "the images share no linux architecture (%s); pods are placed without apportion", describeImages(res))
		return c.release(ctx, pod, ReasonNoArchitecture, nil)
	}
	// Only to learn that some NodePool can run the architectures, and the
	// tolerations an opted-in one needs: the pod is not pinned to it, so
	// Karpenter's own weighted fallback across its pools keeps working.
	choices, errs, err := c.capacity.Choose(ctx, archOnlyStrategy, pod, res.Architectures, "")
	if err != nil {
		return c.release(ctx, pod, ReasonError, err)
	}
	if errs[0] != nil && !errors.Is(errs[0], catalog.ErrCapacity) {
		c.warnOnce(ref, "NoCompatibleArchitecture", "nothing can run the images' architectures (%s): %v; pods are placed without apportion", describeImages(res), errs[0])
		return c.release(ctx, pod, ReasonNoArchitecture, nil)
	}
	d := decision.Decision{
		ArchitectureOnly: true,
		Architectures:    res.Architectures,
		Tolerations:      choices[0].Tolerations,
		Record:           decision.Record{Reason: RecordArchitecture},
	}
	c.addArchitectureRules(&d)
	if shadow {
		result, _, err := c.writeShadow(ctx, pod, ref, d)
		return result, err
	}
	result, written, err := c.write(ctx, pod, ref, d)
	if written {
		log.FromContext(ctx).V(1).Info("placed pod by architecture", "architectures", d.Architectures)
	}
	return result, err
}

// archOnlyStrategy is the one group, without labels, of a placement by
// architecture alone.
var archOnlyStrategy = &strategy.Strategy{Groups: []strategy.Group{{}}}

// inspect reads the pod's image platforms, waiting at most imageWait.
func (c *Controller) inspect(ctx context.Context, pod *corev1.Pod) (*imagearch.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.imageWait)
	defer cancel()
	res, err := c.images.Pod(ctx, pod)
	if err != nil {
		// Logged at info level with the workload's Event, once a minute.
		log.FromContext(ctx).V(1).Info("image inspection failed", "error", err.Error())
	}
	return res, err
}

// groupArchitectures is the architecture requirement a decision for g adds:
// the images' architectures, narrowed to the group's own when it names one.
func groupArchitectures(g strategy.Group, archs []string) []string {
	if len(archs) == 0 {
		return nil
	}
	if arch, ok := g.Selector()[corev1.LabelArchStable]; ok {
		return []string{arch} // SelectFor checked it is one of archs
	}
	return archs
}

// describeImages lists each image with its linux platforms, for Events.
func describeImages(res *imagearch.Result) string {
	if res == nil {
		return ""
	}
	parts := make([]string, 0, len(res.Images))
	for _, img := range res.Images {
		platforms := make([]string, 0, len(img.Platforms))
		for _, p := range img.Platforms {
			platforms = append(platforms, p.String())
		}
		parts = append(parts, img.Reference+": "+strings.Join(platforms, ","))
	}
	return strings.Join(parts, "; ")
}

// strategyImages inspects the images of a pod placed by strategy: nil when
// nothing inspects them or the inspection failed (the pod is placed without
// an architecture constraint, with an Event), and ok false when they share
// no architecture (the pod is released, with an Event).
func (c *Controller) strategyImages(ctx context.Context, pod *corev1.Pod, ref *corev1.ObjectReference) (images *imagearch.Result, ok bool) {
	if c.images == nil {
		return nil, true
	}
	res, err := c.inspect(ctx, pod)
	switch {
	case err != nil:
		c.warnEvery(ref, "ImageInspectionFailed", "%v; placing pods without an architecture constraint", err)
		return nil, true
	case len(res.Architectures) == 0:
		c.warnOnce(ref, "NoCompatibleArchitecture", "the images share no linux architecture (%s); pods are placed without apportion", describeImages(res))
		return nil, false
	}
	return res, true
}
