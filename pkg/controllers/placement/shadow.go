package placement

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// ResultShadow is the result label of the decisions metric for a shadow
// decision: recorded in the apportion.dev/shadow annotation, the pod left
// unchanged.
const ResultShadow = "shadow"

// ShadowRevision is the key shadow decisions are tallied under: apart from
// the revision's real decisions, so that the split shadow mode reports is the
// one apportion would have reached. The real revision counts the bound ones
// by their node, as strays: a workload that leaves shadow mode without a
// rollout places its new pods around them.
func ShadowRevision(namespace, ownerKey string) string {
	return "shadow|" + Revision(namespace, ownerKey)
}

// ShadowReason is the released-pods metric's reason for a pod in shadow mode
// left without a shadow decision (nothing is written on it, and it had no
// gate to release).
func ShadowReason(reason string) string { return "shadow_" + reason }

// shadowCandidate reports whether an ungated pod may be one to decide in
// shadow mode: controller-owned, not terminating, and carrying neither a
// decision (signed or not) nor a shadow decision. Its workload's mode, read
// in Reconcile, tells. It reads a cached pod in place.
func shadowCandidate(o client.Object) bool {
	if gates, ok := podcache.Gates(o); !ok || decision.GatedBy(gates) {
		return false
	}
	if o.GetDeletionTimestamp() != nil || metav1.GetControllerOfNoCopy(o) == nil {
		return false
	}
	for _, k := range []string{annotations.Shadow, annotations.Signature, annotations.Group} {
		if podcache.HasAnnotation(o, k) {
			return false
		}
	}
	return true
}

// podMode is the mode of a pod without a workload apportion follows: its own
// apportion.dev/mode, else the default.
func (c *Controller) podMode(pod *corev1.Pod) string {
	return annotations.FirstMode(pod.Annotations[annotations.Mode], c.defaultMode)
}

// reconcileShadow decides an ungated pod whose workload is in shadow mode
// (with a valid strategy, or placed by architecture alone); any other pod is
// left alone, without a write. Failures write nothing either: they are
// logged and counted (ShadowReason), and the pod runs as it is.
func (c *Controller) reconcileShadow(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	if c.outOfScope(ctx, pod) {
		return reconcile.Result{}, nil
	}
	key := workload.OwnerKey(pod)
	if key == "" {
		// A pod without a workload opts out by its own annotation; a
		// workload's pod, as Resolve says: a cluster policy may not
		// allow it, in shadow mode as in the others.
		if isTrue(pod.Annotations[annotations.Skip]) || c.podMode(pod) != annotations.ModeShadow || !c.byArchitecture(ctx, pod, nil) {
			return reconcile.Result{}, nil
		}
		full, err := c.withImages(ctx, pod)
		if err != nil {
			return c.skipShadow(ctx, ReasonError, err)
		}
		ref := &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
		return c.placeByArchitecture(ctx, full, ref, true)
	}
	info, err := workload.Resolve(ctx, c.kubeClient, pod.Namespace, pod, c.resolve...)
	switch {
	case errors.Is(err, workload.ErrNotCached):
		if c.clock.Since(pod.CreationTimestamp.Time) < c.gateWait {
			return reconcile.Result{RequeueAfter: 250 * time.Millisecond}, nil
		}
		return c.skipShadow(ctx, ReasonError, err)
	case err != nil:
		return c.skipShadow(ctx, ReasonError, err)
	case info == nil, info.Skip, !info.Shadow():
		return reconcile.Result{}, nil // not in shadow mode: nothing to do
	case !info.Found && !c.byArchitecture(ctx, pod, info):
		return reconcile.Result{}, nil
	}
	full, err := c.withImages(ctx, pod)
	if err != nil {
		return c.skipShadow(ctx, ReasonError, err)
	}
	if !info.Found {
		return c.placeByArchitecture(ctx, full, info.Workload.ObjectReference(), true)
	}
	return c.placeByStrategy(ctx, full, key, info)
}

// withImages is pod with its containers' images, which the informer cache
// keeps for gated pods only: read from the API server when images are
// inspected and the cached pod has none (one read per shadow decision, off
// the admission path). Without an API reader the pod is returned as it is.
func (c *Controller) withImages(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	if c.images == nil || c.apiReader == nil || len(pod.Spec.Containers) > 0 {
		return pod, nil
	}
	var full corev1.Pod
	if err := c.apiReader.Get(ctx, client.ObjectKeyFromObject(pod), &full); err != nil {
		return nil, fmt.Errorf("reading the pod's images: %w", err)
	}
	if full.UID != pod.UID {
		return nil, fmt.Errorf("reading the pod's images: %w", apierrors.NewNotFound(corev1.Resource("pods"), pod.Name))
	}
	return &full, nil
}

// WithExcludedNamespaces names the namespaces whose pods are never touched
// (--excluded-namespaces and the system namespace): the webhook never sees
// their pods, and shadow mode leaves them alone too. With labels, the
// namespaces' metadata is cached (the operator caches it with
// --architectures=opt-in) and a namespace labelled annotations.Ignore is left alone
// as well; without, the label is not read (a read would start an informer
// the RBAC may not allow).
func (c *Controller) WithExcludedNamespaces(namespaces []string, labels bool) *Controller {
	c.excluded, c.namespaces = sets.New(namespaces...), labels
	return c
}

// outOfScope reports whether an ungated pod is one the pod webhook never
// holds, whatever its workload says, which shadow mode must leave alone as
// well: pods of excluded or ignored (annotations.Ignore) namespaces, DaemonSet and
// mirror pods, and Karpenter's and apportion's own. An opted-out pod is not
// out of scope here: its workload's policy may refuse the opt-out.
func (c *Controller) outOfScope(ctx context.Context, pod *corev1.Pod) bool {
	switch {
	case c.excluded.Has(pod.Namespace),
		isMirror(pod),
		workload.IsDaemonSetPod(pod),
		ownPods.Has(pod.Labels[appNameLabel]):
		return true
	}
	if !c.namespaces {
		return false
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.kubeClient.Get(ctx, client.ObjectKey{Name: pod.Namespace}, ns); err != nil {
		return false // not cached (tests, or a namespace just made): in scope, as for the webhook's selector
	}
	_, ignored := ns.Labels[annotations.Ignore]
	return ignored
}

func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// isMirror reports whether the pod is a static pod's mirror: the kubelet
// makes its Node the controller (the mirror annotation itself is not kept
// by the pod cache).
func isMirror(pod *corev1.Pod) bool {
	owner := metav1.GetControllerOfNoCopy(pod)
	return owner != nil && owner.Kind == "Node" && owner.APIVersion == "v1"
}

// appNameLabel and ownPods: the chart's pod webhook never sees Karpenter's
// pods nor apportion's own (its objectSelector).
const appNameLabel = "app.kubernetes.io/name"

var ownPods = sets.New("apportion", "karpenter")

// skipShadow leaves a pod in shadow mode without a shadow decision: logged
// (an error once per pod, the other reasons at V(1)) and counted.
func (c *Controller) skipShadow(ctx context.Context, reason string, cause error) (reconcile.Result, error) {
	if cause != nil {
		log.FromContext(ctx).Error(cause, "no shadow decision for the pod", "reason", reason)
	} else {
		log.FromContext(ctx).V(1).Info("no shadow decision for the pod", "reason", reason)
	}
	metrics.ReleasedTotal.WithLabelValues(ShadowReason(reason)).Inc()
	return reconcile.Result{}, nil
}

// writeShadow records d on pod as its shadow decision (and, on a pod the
// webhook gated before it knew the workload's mode, removes the gate in the
// same patch), and reports whether it was written. Nothing else of the pod
// changes: no affinity, toleration, deletion cost or decision annotation.
// An ungated pod is patched without an optimistic lock: only the one
// annotation changes, and its status moves on meanwhile. A patch an
// admission policy refuses is not sent again (refused); ref is the pod's
// workload, for the refusal's Event.
func (c *Controller) writeShadow(ctx context.Context, pod *corev1.Pod, ref *corev1.ObjectReference, d decision.Decision) (reconcile.Result, bool, error) {
	sh := decision.ShadowOf(d)
	if res, no := c.notLeading(ctx, sh.Group, sh.NodePool); no {
		return res, false, nil
	}
	sh.Signature = c.signer.SignShadow(pod.UID, sh.Group, sh.NodePool)
	for attempt := 0; ; attempt++ {
		gated := decision.HasGate(pod)
		err := decision.Write(ctx, c.kubeClient, pod, gated, func(p *corev1.Pod) {
			decision.WriteShadow(p, sh)
			if gated {
				decision.RemoveGate(p)
			}
		})
		switch {
		case err == nil:
			metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(sh.Group), metrics.NodePools.Value(sh.NodePool), ResultShadow).Inc()
			if gated {
				metrics.GateWaitSeconds.Observe(c.clock.Since(pod.CreationTimestamp.Time).Seconds())
			}
			log.FromContext(ctx).V(1).Info("shadow decision", "group", sh.Group, "nodepool", sh.NodePool, "architectures", sh.Architectures, "counts", d.Record.Counts)
			return reconcile.Result{}, true, nil
		case apierrors.IsNotFound(err):
			return reconcile.Result{}, false, nil
		case apierrors.IsConflict(err) && gated:
			fresh := c.stillGated(ctx, pod)
			if fresh == nil || attempt == resends {
				return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, false, nil
			}
			pod = fresh
		default:
			if r, ok := decision.Refused(err); ok {
				metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(sh.Group), metrics.NodePools.Value(sh.NodePool), ResultRefused).Inc()
				res, err := c.refused(ctx, pod, ref, r)
				return res, false, err
			}
			metrics.DecisionsTotal.WithLabelValues(metrics.Groups.Value(sh.Group), metrics.NodePools.Value(sh.NodePool), "error").Inc()
			return reconcile.Result{}, false, decision.APIError(ctx, decision.OperationDecide, fmt.Errorf("writing the shadow decision: %w", err))
		}
	}
}
