package framework

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/test/cluster"
)

// RunForAnnotation is how long RunPods keeps a pod Running before it
// completes it; a pod without it runs until the test ends.
const RunForAnnotation = "e2e.apportion.dev/run-for"

// RunPods plays the kubelet, until the test ends, for the pods of ns
// labelled ProcessLabel (which kwok leaves alone): a bound pod turns
// Running, and after its RunForAnnotation Succeeded, as a container that
// exits 0 would; a deleted one is removed. kwok's own stages complete a
// Job's pods the moment they run, too fast to watch a Job's live pods.
func RunPods(t *testing.T, kube client.Client, ns string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(func() { cancel(); wg.Wait() })
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			var list corev1.PodList
			if err := kube.List(ctx, &list, client.InNamespace(ns), client.HasLabels{cluster.ProcessPodLabel}); err == nil {
				for i := range list.Items {
					stepPod(ctx, kube, &list.Items[i])
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

func stepPod(ctx context.Context, kube client.Client, p *corev1.Pod) {
	now := metav1.Now()
	switch {
	case p.DeletionTimestamp != nil:
		_ = kube.Delete(ctx, p, client.GracePeriodSeconds(0))
	case p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
	case p.Status.Phase != corev1.PodRunning:
		p.Status.Phase, p.Status.StartTime = corev1.PodRunning, &now
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		_ = kube.Status().Update(ctx, p)
	default:
		d, err := time.ParseDuration(p.Annotations[RunForAnnotation])
		if err != nil || p.Status.StartTime == nil || time.Since(p.Status.StartTime.Time) < d {
			return
		}
		p.Status.Phase = corev1.PodSucceeded
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		for _, c := range p.Spec.Containers {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: *p.Status.StartTime, FinishedAt: now}}})
		}
		_ = kube.Status().Update(ctx, p)
	}
}
