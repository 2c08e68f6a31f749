package cli

import (
	"strings"
	"testing"
)

const planDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: team
  annotations: {%s}
spec:
  replicas: 4
  template: {metadata: {labels: {app: web}}}
`

func deploymentWith(annotations string) string {
	return strings.Replace(planDeployment, "%s", annotations, 1)
}

// TestPlanRefusesWhatTheWebhookRefuses: plan -f fails (exit 2) and names
// the fault wherever the webhook or the API server would refuse the same
// input or place it differently than written.
func TestPlanRefusesWhatTheWebhookRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, docs, want string
	}{
		{name: "a mode typo is not taken for required",
			docs: deploymentWith(`apportion.dev/strategy: "a=b,weight=1", apportion.dev/mode: shadw`),
			want: `Deployment web metadata.annotations[apportion.dev/mode] "shadw" is not required, preferred or shadow`},
		{name: "a typo of the strategy key gets a hint",
			docs: deploymentWith(`apportion.dev/stratgy: "a=b,weight=1"`),
			want: `did you mean apportion.dev/strategy?`},
		{name: "a cluster policy's structured group keeps its did-you-mean",
			docs: deploymentWith(``) + `---
apiVersion: apportion.dev/v1alpha1
kind: ClusterPlacementPolicy
metadata: {name: spot}
spec:
  namespaceSelector: {}
  priority: 1
  strategy: {groups: [{labels: {bsae: spot}, weight: 1}]}
`,
			want: `spec.strategy.groups[0].labels["bsae"]: did you mean "base"?`},
		{name: "a cap of 0 is refused",
			docs: deploymentWith(``) + `---
apiVersion: apportion.dev/v1alpha1
kind: PlacementPolicy
metadata: {name: web, namespace: team}
spec:
  target: {kind: Deployment, name: web}
  strategy: {groups: [{labels: {a: b}, weight: 1, max: 0}]}
`,
			want: `spec.strategy.groups[0]: max must be a positive integer, got 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(t, tc.docs, "plan", "-f", "-")
			if code != ExitUsage || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, ExitUsage, tc.want)
			}
		})
	}
}

// TestPlanCronJobPolicyWinsOverClusterPolicy: the PlacementPolicy of a
// CronJob places its Jobs even where a ClusterPlacementPolicy covers the
// Jobs: a namespace's policies come before every cluster policy.
func TestPlanCronJobPolicyWinsOverClusterPolicy(t *testing.T) {
	docs := `apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: ci}
spec:
  schedule: "0 1 * * *"
  jobTemplate:
    spec:
      parallelism: 3
      template: {spec: {restartPolicy: Never}}
---
apiVersion: apportion.dev/v1alpha1
kind: PlacementPolicy
metadata: {name: nightly, namespace: ci}
spec:
  target: {kind: CronJob, name: nightly}
  strategy: {text: "team=1,weight=1"}
---
apiVersion: apportion.dev/v1alpha1
kind: ClusterPlacementPolicy
metadata: {name: jobs}
spec:
  namespaceSelector: {}
  priority: 10
  target: {kinds: [Job]}
  strategy: {text: "platform=1,weight=1"}
`
	p, _ := previewOK(t, docs, "-f", "-")
	if len(p.Workloads) != 1 {
		t.Fatalf("%d workloads, want 1", len(p.Workloads))
	}
	if got := p.Workloads[0]; got.Source != "PlacementPolicy ci/nightly" {
		t.Errorf("CronJob placed by %q, want its PlacementPolicy ci/nightly", got.Source)
	}
}
