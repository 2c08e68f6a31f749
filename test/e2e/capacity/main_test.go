//go:build e2e

// Package capacity_test checks capacity fallback end to end (issue 9) on a
// real control plane with Karpenter's kwok provider (test/cluster): a
// NodePool that cannot give its pods nodes (at its limits, or no instance
// type or offering fits) is marked out of capacity, its stuck pods are
// recreated and placed in the other groups, the pool comes back after the
// TTL, and scale-down removes the fallback pods first; a slow but healthy
// launch is left alone; pods admitted without a decision (strays) count in
// the group of their node; with apportion.dev/rebalance, the fallback pods
// are replaced once the pool is back; a Job's or a Workflow's stuck pod goes
// only at the cost of a retry its owner has left.
//
// Every case has NodePools of its own (their template label caseLabel, which
// its pods select), so the cases do not share capacity and run in parallel,
// except the strays case, which takes the pod webhook away from the whole
// cluster for a moment and so runs alone first.
package capacity_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kwokv1alpha1 "sigs.k8s.io/karpenter/kwok/apis/v1alpha1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

// The replicas' settings, short so that the suite is fast, and chosen
// against the contract's fixed parts (the detector's 10 s grace, kwok's
// launch times):
//   - capacityTimeout 30s: the unsatisfiable pools of the requirements case
//     wait this long (no NodeClaim is ever created for them); the slow-launch
//     case's nodes take 15 s to register, and with Karpenter's batch window
//     and the binding its pods wait ~20 s, so 30 s leaves a margin on a
//     loaded 2-core machine without making that case vacuous (the launch
//     outlasts the 10 s grace by far).
//   - capacityTTL 40s: long enough that the limits case sees the pool stay
//     out while it raises the limit, short enough to wait out.
//   - capacityMaxTTL 2m: a repeated outage doubles to 80 s at most here.
//   - deleteQPS 10: pod deletions never pace the cases (a handful of pods).
//   - gateTimeout 45s: no pod waits that long for a decision on a healthy
//     leader; a stuck gate shows up as a failure, not as a long wait.
//   - --rebalance: only the rebalance case's workload carries
//     apportion.dev/rebalance, so the other cases' fallback pods stay.
//   - driftAfter 15s: the drift case sees its SplitDrift Event within a
//     minute; the other cases' fallback workloads get SplitDrift Events
//     too, which no case reads.
const (
	gateTimeout     = 45 * time.Second
	capacityTimeout = 30 * time.Second
	capacityTTL     = 40 * time.Second
	capacityMaxTTL  = 2 * time.Minute
	deleteQPS       = "10"
	driftAfter      = 15 * time.Second
)

// caseLabel is the NodePool template label (and the pods' nodeSelector) that
// keeps each case on its own NodePools.
const caseLabel = "e2e.apportion.dev/case"

// Node classes: default registers nodes at once; slow and slower delay the
// registration (KWOKNodeClass spec.nodeRegistrationDelay), so a NodeClaim
// is launching for that long.
const (
	classDefault = "default"
	classSlow    = "slow"
	classSlower  = "slower"
	slowDelay    = 15 * time.Second
	slowerDelay  = 45 * time.Second
)

// Instance types (see instanceTypesFile): c-2x and c-4x are kwok's own
// (2 and 4 vCPU, 100m kube-reserved each); noSpotType is c-2x with its spot
// offerings taken away.
const (
	typeC2x    = "c-2x-amd64-linux"
	typeC4x    = "c-4x-amd64-linux"
	noSpotType = "nospot-2x-amd64-linux"
	// noSuchType is an instance type name no provider has.
	noSuchType = "e2e-no-such-type"
)

// env is the cluster and the replica every case shares (the cases run in
// parallel against one leader).
var env framework.Suite

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(framework.RunSuite(m, &env, framework.SuiteOptions{
		Name: "capacity",
		Configure: func(ctx context.Context, s *framework.Suite, opts *cluster.Options) error {
			types, err := instanceTypesFile(ctx, s.Dir)
			if err != nil {
				return err
			}
			opts.KarpenterEnv = []string{"INSTANCE_TYPES_FILE_PATH=" + types}
			return nil
		},
		// The Workflow CRD is served before the replicas start, so that
		// they watch Workflows from the first admission (midjob_test.go).
		Prepare: func(ctx context.Context, s *framework.Suite) error {
			if err := framework.InstallWorkflows(ctx, s.Kube); err != nil {
				return err
			}
			return createNodeClassesAndPools(ctx)
		},
		Replicas:    1,
		GateTimeout: gateTimeout,
		Args: []string{"--capacity-timeout=" + capacityTimeout.String(), "--capacity-ttl=" + capacityTTL.String(),
			"--capacity-max-ttl=" + capacityMaxTTL.String(), "--capacity-delete-qps=" + deleteQPS, "--rebalance",
			"--drift-after=" + driftAfter.String()},
	}))
}

// instanceTypesFile writes kwok's embedded instance types plus noSpotType
// (c-2x without its spot offerings) for Karpenter's INSTANCE_TYPES_FILE_PATH.
//
// An offering cannot be made unavailable this way: the kwok provider sets
// every offering it reads Available (setDefaultOptions), so a type without
// spot offerings is the closest the file can come to spot capacity running
// out.
func instanceTypesFile(ctx context.Context, dir string) (string, error) {
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/karpenter")
	list.Dir = framework.RepoRoot()
	list.Env = append(os.Environ(), "GOTOOLCHAIN=auto")
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("finding the karpenter module: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "kwok", "cloudprovider", "instance_types.json"))
	if err != nil {
		return "", fmt.Errorf("reading kwok's instance types: %w", err)
	}
	var types []map[string]any
	if err := json.Unmarshal(raw, &types); err != nil {
		return "", fmt.Errorf("kwok's instance types: %w", err)
	}
	var noSpot map[string]any
	for _, it := range types {
		if it["name"] != typeC2x {
			continue
		}
		// A deep copy through JSON, then only the on-demand offerings.
		b, _ := json.Marshal(it)
		_ = json.Unmarshal(b, &noSpot)
		noSpot["name"] = noSpotType
		offerings, _ := noSpot["offerings"].([]any)
		var kept []any
		for _, o := range offerings {
			if b, _ := json.Marshal(o); !strings.Contains(string(b), `"spot"`) {
				kept = append(kept, o)
			}
		}
		if len(kept) == 0 || len(kept) == len(offerings) {
			return "", fmt.Errorf("%s: %d of %d offerings are on-demand, want some but not all", typeC2x, len(kept), len(offerings))
		}
		noSpot["offerings"] = kept
	}
	if noSpot == nil {
		return "", errors.New("kwok's instance types have no " + typeC2x)
	}
	b, err := json.MarshalIndent(append(types, noSpot), "", " ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "instance-types.json")
	return path, os.WriteFile(path, b, 0o644)
}

// pool describes one NodePool of a case.
type pool struct {
	name, caseName, capacityType, class string
	instanceTypes                       []string
	weight                              int32
	cpuLimit                            string // spec.limits cpu; "": a generous one
	memoryLimit                         string // spec.limits memory; "": none
	taints                              []corev1.Taint
}

// pools are every case's NodePools, created before the tests run so that
// they are all Ready (Karpenter provisions only from Ready pools).
var pools = []pool{
	// limits: c-2x spot nodes hold two 900m pods each; the case lowers the
	// cpu limit to what the pool uses.
	{name: "limits-od", caseName: "limits", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "limits-spot", caseName: "limits", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50},
	// rebalance: the limits case again, with apportion.dev/rebalance.
	{name: "rebalance-od", caseName: "rebalance", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "rebalance-spot", caseName: "rebalance", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50},
	// cpulimit: spot's cpu limit 3 holds one c-2x node (two 900m pods), and
	// its usage stays below the limit.
	{name: "cpulimit-od", caseName: "cpulimit", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "cpulimit-spot", caseName: "cpulimit", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50, cpuLimit: "3"},
	// unsatisfiable: a spot pool of an instance type that does not exist.
	{name: "nosuch-od", caseName: "nosuch", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "nosuch-spot", caseName: "nosuch", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{noSuchType}, weight: 50},
	// unsatisfiable: a spot pool of a type that has no spot offering.
	{name: "nospot-od", caseName: "nospot", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "nospot-spot", caseName: "nospot", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{noSpotType}, weight: 50},
	// slow launches within the timeout.
	{name: "slow-od", caseName: "slow", capacityType: karpv1.CapacityTypeOnDemand, class: classSlow, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "slow-spot", caseName: "slow", capacityType: karpv1.CapacityTypeSpot, class: classSlow, instanceTypes: []string{typeC4x}, weight: 50},
	// slow launches while the pool is capped at what it has (launching
	// included).
	{name: "capped-od", caseName: "capped", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "capped-spot", caseName: "capped", capacityType: karpv1.CapacityTypeSpot, class: classSlow, instanceTypes: []string{typeC4x}, weight: 50},
	// slower launches than --capacity-timeout, covered by the workload's.
	{name: "slower-od", caseName: "slower", capacityType: karpv1.CapacityTypeOnDemand, class: classSlower, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "slower-spot", caseName: "slower", capacityType: karpv1.CapacityTypeSpot, class: classSlower, instanceTypes: []string{typeC4x}, weight: 50},
	// headroom: limits that leave less room than the pool's smallest
	// instance type while usage stays below them (headroom_test.go).
	{name: "hrcpu-od", caseName: "hrcpu", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "hrcpu-spot", caseName: "hrcpu", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50, cpuLimit: "3"},
	{name: "hrmem-od", caseName: "hrmem", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "hrmem-spot", caseName: "hrmem", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50, memoryLimit: "6Gi"},
	{name: "hrtwo-od", caseName: "hrtwo", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "hrtwo-spot-a", caseName: "hrtwo", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50, cpuLimit: "3"},
	{name: "hrtwo-spot-b", caseName: "hrtwo", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC4x}, weight: 40, cpuLimit: "5"},
	// forged: a tenant's forged decisions and never-fitting pods next to
	// another namespace's workload (headroom_test.go).
	{name: "forged-od", caseName: "forged", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "forged-spot", caseName: "forged", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC4x}, weight: 50},
	// evidence: a tenant that may create Events forges Karpenter's about
	// the spot pool and another namespace's pods (evidence_test.go).
	{name: "evidence-od", caseName: "evidence", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "evidence-spot", caseName: "evidence", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC4x}, weight: 50},
	// drift: a spot pool tainted NoSchedule, without the
	// apportion.dev/tolerate opt-in (drift_test.go).
	{name: "drift-od", caseName: "drift", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "drift-spot", caseName: "drift", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC4x}, weight: 50,
		taints: []corev1.Taint{{Key: "e2e.apportion.dev/spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	// jobfb: a Job's pods fall back without costing it a retry
	// (job_test.go); the spot pool holds two of its pods a node.
	{name: "jobfb-od", caseName: "jobfb", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "jobfb-spot", caseName: "jobfb", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50},
	// jobretry, jobkeep: a spot pool whose cpu limit (2) holds one c-2x
	// node (two 900m pods) fills while a Job runs, and its stuck pod's
	// deletion costs a retry; wfretry: a spot pool that never gets a node
	// (no spot offering) for Workflow pods (midjob_test.go).
	{name: "jobretry-od", caseName: "jobretry", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "jobretry-spot", caseName: "jobretry", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50, cpuLimit: "2"},
	{name: "jobkeep-od", caseName: "jobkeep", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "jobkeep-spot", caseName: "jobkeep", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50, cpuLimit: "2"},
	{name: "wfretry-od", caseName: "wfretry", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "wfretry-spot", caseName: "wfretry", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{noSpotType}, weight: 50},
	// full: a spot pool whose cpu limit is 0 never gets a pod of a Job
	// (full_test.go).
	{name: "full-od", caseName: "full", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "full-spot", caseName: "full", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC2x}, weight: 50, cpuLimit: "0"},
	// scoped: a spot pool whose memory limit (1Gi) leaves room for no
	// instance type (kwok's smallest has 2Gi), and whose requirements
	// name none, so apportion cannot tell: out for the workload alone
	// (full_test.go).
	{name: "scoped-od", caseName: "scoped", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "scoped-spot", caseName: "scoped", capacityType: karpv1.CapacityTypeSpot, class: classDefault, weight: 50, memoryLimit: "1Gi"},
	// strays.
	{name: "strays-od", caseName: "strays", capacityType: karpv1.CapacityTypeOnDemand, class: classDefault, instanceTypes: []string{typeC4x}, weight: 10},
	{name: "strays-spot", caseName: "strays", capacityType: karpv1.CapacityTypeSpot, class: classDefault, instanceTypes: []string{typeC4x}, weight: 50},
}

func (p pool) limits(cpu string) karpv1.Limits {
	l := karpv1.Limits{corev1.ResourceCPU: resource.MustParse(cpu)}
	if p.memoryLimit != "" {
		l[corev1.ResourceMemory] = resource.MustParse(p.memoryLimit)
	}
	return l
}

// requirements are the pool's capacity type, amd64, linux and its instance
// types (none named: any of kwok's).
func (p pool) requirements() []karpv1.NodeSelectorRequirementWithMinValues {
	reqs := []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{p.capacityType}},
		{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
		{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}},
	}
	if len(p.instanceTypes) > 0 {
		reqs = append(reqs, karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: p.instanceTypes})
	}
	return reqs
}

func createNodeClassesAndPools(ctx context.Context) error {
	for name, delay := range map[string]time.Duration{classDefault: 0, classSlow: slowDelay, classSlower: slowerDelay} {
		nc := &kwokv1alpha1.KWOKNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: kwokv1alpha1.KWOKNodeClassSpec{NodeRegistrationDelay: metav1.Duration{Duration: delay}}}
		if err := env.Kube.Create(ctx, nc); err != nil {
			return fmt.Errorf("creating KWOKNodeClass %s: %w", name, err)
		}
	}
	for _, p := range pools {
		if err := env.Kube.Create(ctx, p.nodePool()); err != nil {
			return fmt.Errorf("creating NodePool %s: %w", p.name, err)
		}
	}
	return nil
}

func (p pool) nodePool() *karpv1.NodePool {
	cpu := p.cpuLimit
	if cpu == "" {
		cpu = "200"
	}
	return &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: p.name},
		Spec: karpv1.NodePoolSpec{
			Weight: ptr.To(p.weight),
			Template: karpv1.NodeClaimTemplate{
				ObjectMeta: karpv1.ObjectMeta{Labels: map[string]string{caseLabel: p.caseName}},
				Spec: karpv1.NodeClaimTemplateSpec{
					Taints:       p.taints,
					NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.kwok.sh", Kind: "KWOKNodeClass", Name: p.class},
					Requirements: p.requirements(),
					ExpireAfter:  karpv1.MustParseNillableDuration("Never"),
				},
			},
			// Nothing removed behind a case's back.
			Disruption: karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmpty, ConsolidateAfter: karpv1.MustParseNillableDuration("Never")},
			Limits:     p.limits(cpu),
		},
	}
}
