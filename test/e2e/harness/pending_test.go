//go:build e2e

package harness_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestUnfitPodStaysPending creates pods that no sample NodePool can serve
// and checks that each stays Pending, that Karpenter launches nothing for
// it, and that Karpenter says why: in a FailedScheduling event on the pod
// (what `kubectl describe pod` shows) and in its log.
func TestUnfitPodStaysPending(t *testing.T) {
	e := start(t)
	cases := []struct {
		name   string
		mutate func(*corev1.Pod)
		// reasons must all be in Karpenter's message. It has one part per
		// NodePool, and the gpu pool always refuses with its taint, so each
		// case names what the other pools say.
		reasons []string
	}{
		{"windows", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{corev1.LabelOSStable: "windows"}
		}, []string{"incompatible requirements, key kubernetes.io/os, kubernetes.io/os In [windows] not in kubernetes.io/os In [linux]"}},
		// 32 CPUs: more than the largest allowed instance (16 vCPU).
		{"too-big", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("32")
		}, []string{"no instance type has enough resources"}},
		// Asks for the gpu pool's label without tolerating its taint: the
		// gpu pool refuses for the taint, the others lack the label.
		{"gpu-without-toleration", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"dedicated": "gpu"}
		}, []string{"did not tolerate taint (taint=dedicated=gpu:NoSchedule)", `label "dedicated" does not have known values`}},
	}
	var pods []*corev1.Pod
	for _, tc := range cases {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "e2e", Name: tc.name}, Spec: podSpec()}
		tc.mutate(p)
		e.create(t, p)
		pods = append(pods, p)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := pods[i]
			var msg string
			waitFor(t, 2*time.Minute, "Karpenter's FailedScheduling event on pod "+p.Name, func() error {
				var err error
				msg, err = karpenterEvent(t, e, p)
				return err
			})
			t.Logf("Karpenter's event on pod %s: %s", p.Name, msg)
			for _, r := range tc.reasons {
				if !strings.Contains(msg, r) {
					t.Errorf("Karpenter's reason does not say %q", r)
				}
			}
			// The log reaches its file through a pipe, so it may trail the event.
			var line string
			waitFor(t, 30*time.Second, "a line about pod "+p.Name+" in Karpenter's log", func() error {
				if line = karpenterLogLine(t, e, p.Name); line == "" {
					return fmt.Errorf("none yet")
				}
				return nil
			})
			t.Logf("Karpenter's log: %s", line)
			if err := e.kube.Get(t.Context(), client.ObjectKeyFromObject(p), p); err != nil {
				t.Fatal(err)
			}
			if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
				t.Errorf("pod %s is %s on node %q, want Pending and unscheduled", p.Name, p.Status.Phase, p.Spec.NodeName)
			}
		})
	}
	// Karpenter has looked at every pod by now (each has its event): none of
	// them may have made it launch anything.
	if ncs := e.nodeClaims(t); len(ncs) != 0 {
		for _, nc := range ncs {
			t.Errorf("NodeClaim %s was created (NodePool %s)", nc.Name, nc.Labels["karpenter.sh/nodepool"])
		}
	}
}

// karpenterEvent returns the message of Karpenter's FailedScheduling event
// about the pod. kube-scheduler reports the same reason ("0/0 nodes are
// available"); only Karpenter's says which NodePool refused and why.
func karpenterEvent(t *testing.T, e env, p *corev1.Pod) (string, error) {
	var list corev1.EventList
	if err := e.kube.List(t.Context(), &list, client.InNamespace(p.Namespace)); err != nil {
		return "", fmt.Errorf("listing events: %w", err)
	}
	for _, ev := range list.Items {
		if ev.InvolvedObject.UID == p.UID && ev.Reason == "FailedScheduling" &&
			(ev.Source.Component == "karpenter" || ev.ReportingController == "karpenter") {
			return ev.Message, nil
		}
	}
	return "", fmt.Errorf("no FailedScheduling event from karpenter yet")
}

// karpenterLogLine returns the first line of Karpenter's log that names the
// pod and says it could not be scheduled, or "".
func karpenterLogLine(t *testing.T, e env, pod string) string {
	f, err := os.Open(filepath.Join(e.c.LogDir(), "karpenter.log"))
	if err != nil {
		t.Fatalf("opening Karpenter's log: %v", err)
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for s.Scan() {
		if line := s.Text(); strings.Contains(line, `"`+pod+`"`) && strings.Contains(line, "could not schedule pod") {
			return line
		}
	}
	return ""
}
