//go:build e2e

// Package harness_test proves the local cluster of test/cluster without
// apportion: Karpenter (kwok provider) provisions from the sample NodePools
// of test/testdata/karpenter the way their README says, nodes become Ready,
// pods Running, and a pod no NodePool fits stays Pending with Karpenter's
// reason. It also measures how long a Deployment takes to run. Each test
// starts its own cluster, so no test sees another's nodes.
package harness_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// TestNodePoolSelection deploys one Deployment per constraint and checks
// that Karpenter serves it from the pool the sample README names: each pod
// on a Ready node of that pool, launched by a NodeClaim of that pool, with
// the pool's capacity type and architecture.
func TestNodePoolSelection(t *testing.T) {
	e := start(t)
	arm64 := corev1.NodeSelectorRequirement{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}
	cases := []struct {
		name     string
		mutate   func(*corev1.PodSpec)
		pool     string
		capacity string
		arch     string
	}{
		// First, while there are no nodes at all: later pods with no
		// constraint could otherwise fill the others' spare room.
		{"no constraint: highest weight, the tainted gpu pool skipped", nil, "spot-amd64", "spot", "amd64"},
		{"on-demand node selector", func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{karpv1.CapacityTypeLabelKey: "on-demand"}
		}, "on-demand-amd64", "on-demand", "amd64"},
		// Required node affinity, the form apportion writes.
		{"arm64 node affinity", func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{arm64}}},
				},
			}}
		}, "spot-arm64", "spot", "arm64"},
		{"on-demand and arm64", func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{karpv1.CapacityTypeLabelKey: "on-demand", corev1.LabelArchStable: "arm64"}
		}, "on-demand-arm64", "on-demand", "arm64"},
		{"gpu toleration and selector", func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{"dedicated": "gpu"}
			s.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
		}, "gpu", "on-demand", "amd64"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("case-%d", i)
			spec := podSpec()
			if tc.mutate != nil {
				tc.mutate(&spec)
			}
			e.create(t, deployment(name, 3, spec))
			pods := e.waitRunning(t, name, 3, 3*time.Minute)

			// Pods can run before Karpenter has linked the NodeClaim to its
			// node and marked it Ready, so the NodeClaim side is polled.
			nodes := map[string]bool{}
			waitFor(t, time.Minute, "the nodes and NodeClaims of "+name, func() error {
				claims := map[string]karpv1.NodeClaim{} // by node name
				for _, nc := range e.nodeClaims(t) {
					claims[nc.Status.NodeName] = nc
				}
				var problems []error
				for _, p := range pods {
					n := e.node(t, p.Spec.NodeName)
					nodes[n.Name] = true
					if !nodeReady(n) {
						problems = append(problems, fmt.Errorf("pod %s runs on node %s, which is not Ready", p.Name, n.Name))
					}
					for key, want := range map[string]string{
						karpv1.NodePoolLabelKey:     tc.pool,
						karpv1.CapacityTypeLabelKey: tc.capacity,
						corev1.LabelArchStable:      tc.arch,
					} {
						if got := n.Labels[key]; got != want {
							problems = append(problems, fmt.Errorf("pod %s: node %s has %s=%q, want %q", p.Name, n.Name, key, got, want))
						}
					}
					nc, ok := claims[n.Name]
					switch {
					case !ok:
						problems = append(problems, fmt.Errorf("node %s has no NodeClaim", n.Name))
					case nc.Labels[karpv1.NodePoolLabelKey] != tc.pool:
						problems = append(problems, fmt.Errorf("NodeClaim %s comes from NodePool %q, want %q", nc.Name, nc.Labels[karpv1.NodePoolLabelKey], tc.pool))
					case !nc.StatusConditions().Root().IsTrue():
						problems = append(problems, fmt.Errorf("NodeClaim %s is not Ready: %v", nc.Name, nc.Status.Conditions))
					}
				}
				return errors.Join(problems...)
			})
			t.Logf("%d pods Running on %d node(s) of NodePool %s (%s/%s)", len(pods), len(nodes), tc.pool, tc.capacity, tc.arch)
		})
	}
}
