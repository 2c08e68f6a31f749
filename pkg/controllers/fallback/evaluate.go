package fallback

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/capacity"
)

// signal is the outcome of an evaluation: a reason to mark the key (for
// every workload when wide), with a description for the Event; or a pod
// that does not fit its pool (misfit); or when to look again (zero: on
// events only).
type signal struct {
	reason string
	detail string
	wide   bool
	misfit bool
	wake   time.Time
	// np is the NodePool as the evidence saw it (wide Karpenter-mode
	// signals), for checking the evidence again when the outage ends.
	np *karpv1.NodePool
	// used is what counted against its limits (reason limits).
	used corev1.ResourceList
}

// evaluate looks for a signal against key for a pod unschedulable since
// since (not before lastBack, the end of the key's last outage).
func (c *Controller) evaluate(ctx context.Context, pod *corev1.Pod, key capacity.Key, since, lastBack time.Time, timeout time.Duration, now time.Time) (signal, error) {
	waited := now.Sub(since)
	if c.opts.NodeLabels {
		if waited >= timeout {
			return signal{reason: ReasonTimeout, detail: fmt.Sprintf("pod %s stayed unschedulable for %s", pod.Name, timeout)}, nil
		}
		return signal{wake: since.Add(timeout)}, nil
	}
	pool := key.Name()
	np, sig, err := c.poolSignal(ctx, pool, lastBack, now)
	if err != nil || sig.reason != "" {
		return sig, err
	}

	claimUntil, newestClaim, err := c.onTheWay(ctx, pool, timeout, now)
	if err != nil {
		return signal{}, err
	}
	// What Karpenter said about this pod in its latest scheduling round:
	// a failure newer than its nomination and than the pool's newest
	// NodeClaim (which may be for it).
	pe := c.podEventsOf(pod)
	failedFresh := !pe.failedAt.Before(since.Add(-time.Second)) && pe.failedAt.After(lastBack) && pe.failedAt.After(pe.nominatedAt) && !newestClaim.After(pe.failedAt)
	if failedFresh {
		if sig, ok := failureSignal(pe.failed, np, pool); ok {
			if sig.reason == ReasonLimits {
				sig = c.scopeLimits(ctx, sig, pe.failedAt, now)
			}
			return sig, nil
		}
	}

	// Is Karpenter launching a node for the pool? Then wait for it to be
	// initialised, fail, or outlast the timeout (NodeClaim events come
	// sooner).
	if claimUntil.After(now) {
		return signal{wake: claimUntil}, nil
	}
	wake := since.Add(timeout)
	if failed, ok := c.failure(pool); ok && failed.After(lastBack) && now.Sub(failed) < timeout {
		if settled := failed.Add(Grace); now.Before(settled) {
			wake = earliest(wake, settled)
		} else {
			return signal{reason: ReasonLaunchFailed, wide: true, np: np,
				detail: fmt.Sprintf("a NodeClaim of the NodePool failed to launch %s ago and none is on its way", now.Sub(failed).Round(time.Second))}, nil
		}
	}
	// Karpenter looked at the pod in its latest round and found it no
	// place in the NodePool (and nothing since): its Nominated Events are
	// rate-limited across pods, so their absence alone says nothing.
	if failedFresh {
		if waited >= c.opts.NominationWait {
			return signal{reason: ReasonNoNodeClaim, detail: fmt.Sprintf("pod %s stayed unschedulable for %s; Karpenter created no NodeClaim of the NodePool for it and nominated it to none", pod.Name, waited.Round(time.Second))}, nil
		}
		wake = earliest(wake, since.Add(c.opts.NominationWait))
	}
	if waited >= timeout {
		return signal{reason: ReasonTimeout, detail: fmt.Sprintf("pod %s stayed unschedulable for %s with no NodeClaim on its way", pod.Name, timeout)}, nil
	}
	return signal{wake: wake}, nil
}

// poolSignal reads the NodePool as Karpenter keeps it (nil when gone) and
// what it says by itself: not Ready or gone, or, since the key's last
// outage, Karpenter's word that its requirements leave no instance type,
// when its state agrees (noTypesHold).
func (c *Controller) poolSignal(ctx context.Context, pool string, lastBack, now time.Time) (*karpv1.NodePool, signal, error) {
	np := &karpv1.NodePool{}
	if err := c.kubeClient.Get(ctx, client.ObjectKey{Name: pool}, np); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, signal{}, fmt.Errorf("getting NodePool %s: %w", pool, err)
		}
		np = nil
	}
	if sig, bad := poolState(np); bad {
		sig.np = np
		return np, sig, nil
	}
	if at := c.noTypesAt(np); at.After(lastBack) && now.Sub(at) < noTypesFresh && c.noTypesHold(ctx, np) {
		return np, signal{reason: ReasonNoInstanceTypes, wide: true, np: np,
			detail: "Karpenter: NodePool requirements filtered out all compatible available instance types"}, nil
	}
	return np, signal{}, nil
}

// failureSignal is what a FailedScheduling message of Karpenter's says
// about the pod in pool np, if it says anything apportion acts on.
func failureSignal(message string, np *karpv1.NodePool, pool string) (signal, bool) {
	v := capacity.ReadFailedScheduling(message, pool)
	switch v.Finding {
	case capacity.FindingLimits:
		// Karpenter computes this from the pool's limits; a pool without
		// limits cannot be at them (the Event is not Karpenter's). Its
		// scope is scopeLimits'.
		if np != nil && len(np.Spec.Limits) > 0 {
			return signal{reason: ReasonLimits, np: np, detail: "Karpenter: " + v.Detail}, true
		}
	case capacity.FindingDoesNotFit:
		return signal{misfit: true, detail: v.Detail}, true
	case capacity.FindingNoOffering:
		return signal{reason: ReasonNoOffering, detail: "Karpenter: " + v.Detail}, true
	}
	return signal{}, false
}

// scopeLimits gives a limits finding its scope: every workload when the
// NodePool's own state backs it (limitsHold), the pod's workload
// otherwise. The state may trail the Event (Karpenter creates the
// NodeClaims of a round just after it writes the round's Events), so a
// finding the state does not back yet is looked at again once Karpenter
// had Grace to create them.
func (c *Controller) scopeLimits(ctx context.Context, sig signal, failedAt, now time.Time) signal {
	used, backed := c.limitsHold(ctx, sig.np)
	sig.used = used
	if backed {
		sig.wide = true
		return sig
	}
	if settled := failedAt.Add(Grace); now.Before(settled) {
		return signal{wake: settled}
	}
	return sig
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// unschedulableSince is when the scheduler found no node for the pod.
func unschedulableSince(pod *corev1.Pod) (time.Time, bool) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			if cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return cond.LastTransitionTime.Time, true
			}
			return time.Time{}, false
		}
	}
	return time.Time{}, false
}
