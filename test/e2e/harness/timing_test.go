//go:build e2e

package harness_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestTimeToRunning measures, on a fresh cluster each, how long a
// Deployment of 10 and of 100 replicas takes from its creation until all its
// pods are Running: the ReplicaSet controller, Karpenter's batching and
// launch, node registration and kwok's simulated start-up together. The
// figures are reported, not judged: they depend on the machine.
func TestTimeToRunning(t *testing.T) {
	for _, n := range []int{10, 100} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			e := start(t)
			name := fmt.Sprintf("timing-%d", n)
			created := time.Now()
			e.create(t, deployment(name, int32(n), podSpec()))

			// Milestones as first seen by polling every 250 ms.
			var allCreated, allBound time.Duration
			pods := e.waitRunning(t, name, n, 10*time.Minute, func(pods []corev1.Pod) {
				bound := 0
				for _, p := range pods {
					if p.Spec.NodeName != "" {
						bound++
					}
				}
				if allCreated == 0 && len(pods) == n {
					allCreated = time.Since(created)
				}
				if allBound == 0 && bound == n {
					allBound = time.Since(created)
				}
			})
			running := time.Since(created)
			nodes := map[string]bool{}
			for _, p := range pods {
				nodes[p.Spec.NodeName] = true
			}
			t.Logf("TIMING %d replicas: Deployment create -> all pods Running %s (all pods created %s, all bound to nodes %s; %d NodeClaims, %d nodes)",
				n, round(running), round(allCreated), round(allBound), len(e.nodeClaims(t)), len(nodes))
		})
	}
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
