package capacity

import (
	"reflect"
	"strings"
	"testing"
)

// Karpenter's FailedScheduling messages as its provisioner writes them
// (sigs.k8s.io/karpenter v1.15 scheduling: "Failed to schedule pod, " and
// one error per NodePool joined with "; "; an incompatible requirements
// error joins its keys with "; " too).
const (
	// Pinned to spot: on-demand fails on the nodepool (and capacity-type)
	// requirement, spot on its limits, gpu on its node limit.
	msgLimits = "Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [on-demand]; " +
		"key karpenter.sh/capacity-type, karpenter.sh/capacity-type In [spot] not in karpenter.sh/capacity-type In [on-demand]; " +
		"all available instance types exceed limits for nodepool (NodePool=spot); " +
		"node limits have been exhausted for nodepool (NodePool=gpu)"
	spotReqs  = "requirements=karpenter.sh/capacity-type In [spot], karpenter.sh/nodepool In [spot], kubernetes.io/arch In [amd64], kubernetes.io/os In [linux]"
	resources = `resources={"cpu":"900","memory":"1Gi","pods":"1"}`
	// The other pools fail on the nodepool requirement; spot's instance
	// types are looked at.
	otherPools = "Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [on-demand]; " +
		"incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [gpu]; "
)

func part(head string) string { return head + ", " + spotReqs + ", " + resources }

func TestReadFailedScheduling(t *testing.T) {
	notEnough := part("no instance type has enough resources")
	offering := part("no instance type has the required offering")
	for _, tc := range []struct {
		name, msg, pool string
		want            Verdict
	}{
		{"limits of the pool", msgLimits, "spot",
			Verdict{FindingLimits, "all available instance types exceed limits for nodepool (NodePool=spot)"}},
		{"node limits of the pool", msgLimits, "gpu",
			Verdict{FindingLimits, "node limits have been exhausted for nodepool (NodePool=gpu)"}},
		{"incompatible requirements only", msgLimits, "on-demand", Verdict{}},
		{"a name that is a prefix of the pool's", msgLimits, "spo", Verdict{}},
		{"a name that is a suffix of the pool's", msgLimits, "pot", Verdict{}},
		{"limits of another pool", "Failed to schedule pod, all available instance types exceed limits for nodepool (NodePool=spot-arm64)", "spot", Verdict{}},
		{"limits of another pool, the pool's own part does not fit", otherPools +
			"all available instance types exceed limits for nodepool (NodePool=gpu); " + notEnough, "spot",
			Verdict{FindingDoesNotFit, notEnough}},
		{"limits after a does-not-fit part", "Failed to schedule pod, " + notEnough + "; all available instance types exceed limits for nodepool (NodePool=spot)", "spot",
			Verdict{FindingLimits, "all available instance types exceed limits for nodepool (NodePool=spot)"}},
		{"limits before a does-not-fit part", "Failed to schedule pod, all available instance types exceed limits for nodepool (NodePool=spot); " + notEnough, "spot",
			Verdict{FindingLimits, "all available instance types exceed limits for nodepool (NodePool=spot)"}},
		{"does not fit", otherPools + notEnough, "spot", Verdict{FindingDoesNotFit, notEnough}},
		{"offering only", otherPools + offering, "spot", Verdict{FindingNoOffering, offering}},
		{"offering only, the pair text", otherPools + part("no instance type which met the scheduling requirements and had enough resources, had a required offering"), "spot",
			Verdict{FindingNoOffering, part("no instance type which met the scheduling requirements and had enough resources, had a required offering")}},
		{"multi-key requirements part before an offering part",
			"Failed to schedule pod, incompatible requirements, key karpenter.sh/nodepool, karpenter.sh/nodepool In [spot] not in karpenter.sh/nodepool In [on-demand]; " +
				"key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [eu-west-1a] not in topology.kubernetes.io/zone In [eu-west-1b]; " + offering,
			"spot", Verdict{FindingNoOffering, offering}},
		{"CPU typo suffix", otherPools + notEnough + " (CPU request >= 1 Million, m vs M typo?)", "spot",
			Verdict{FindingDoesNotFit, notEnough + " (CPU request >= 1 Million, m vs M typo?)"}},
		{"no Failed to schedule pod prefix", "all available instance types exceed limits for nodepool (NodePool=spot)", "spot", Verdict{}},
		{"the scheduler's message", "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.", "spot", Verdict{}},
		{"no pool", msgLimits, "", Verdict{}},
		{"empty", "", "spot", Verdict{}},
		{"prefix only", "Failed to schedule pod, ", "spot", Verdict{}},
		{"minValues", "Failed to schedule pod, pod didn’t schedule because NodePool couldn’t meet minValues requirements, minValues requirement is not met for label(s) (label=node.kubernetes.io/instance-type) (NodePool=spot)", "spot", Verdict{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReadFailedScheduling(tc.msg, tc.pool); got != tc.want {
				t.Errorf("ReadFailedScheduling(%q, %q)\n got %+v\nwant %+v", tc.msg, tc.pool, got, tc.want)
			}
		})
	}
}

// TestDoesNotFitTexts: every InstanceTypeFilterError text other than the two
// offering-only ones says the pod does not fit.
func TestDoesNotFitTexts(t *testing.T) {
	for _, head := range []string{
		"no instance type met the scheduling requirements or had enough resources or had a required offering",
		"no instance type met the scheduling requirements or had enough resources",
		"no instance type met the scheduling requirements or had a required offering",
		"no instance type had enough resources or had a required offering",
		"no instance type met all requirements",
		"no instance type has enough resources",
		"no instance type which had enough resources and the required offering met the scheduling requirements",
		"no instance type which met the scheduling requirements and the required offering had the required resources",
		"no instance type met the requirements/resources/offering tuple",
	} {
		msg := otherPools + part(head)
		if v := ReadFailedScheduling(msg, "spot"); v.Finding != FindingDoesNotFit || v.Detail != part(head) {
			t.Errorf("%q: %+v, want does not fit", head, v)
		}
	}
	dra := "Failed to schedule pod, no instance type satisfies both scheduling and dynamic resource requirements"
	if v := ReadFailedScheduling(dra, "spot"); v.Finding != FindingDoesNotFit {
		t.Errorf("%q: %+v, want does not fit", dra, v)
	}
}

func TestSegments(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"a", []string{"a"}},
		{"a; b", []string{"a", "b"}},
		{"incompatible requirements, key x, x In [a] not in x In [b]; key y, y In [c] not in y In [d]; b",
			[]string{"incompatible requirements, key x, x In [a] not in x In [b]; key y, y In [c] not in y In [d]", "b"}},
		{"key x, first", []string{"key x, first"}},
		{"a;b", []string{"a;b"}},
	} {
		if got := segments(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("segments(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzReadFailedScheduling: any message is read without a panic, and a
// verdict quotes the message and names the pool when it says limits.
func FuzzReadFailedScheduling(f *testing.F) {
	for _, seed := range []string{
		msgLimits, otherPools + part("no instance type has enough resources"), otherPools + part("no instance type has the required offering"),
		"Failed to schedule pod, ", "Failed to schedule pod, ; ; key ", "Failed to schedule pod, key a; key b; no instance type", "", ";", "key ",
	} {
		f.Add(seed, "spot")
	}
	f.Add(msgLimits, "")
	f.Add("Failed to schedule pod, all available instance types exceed limits for nodepool (NodePool=)", "")
	f.Fuzz(func(t *testing.T, msg, pool string) {
		v := ReadFailedScheduling(msg, pool)
		switch v.Finding {
		case FindingNone:
			if v.Detail != "" {
				t.Fatalf("no finding with detail %q", v.Detail)
			}
		case FindingLimits:
			if !strings.Contains(v.Detail, "(NodePool="+pool+")") {
				t.Fatalf("limits detail %q does not name pool %q", v.Detail, pool)
			}
			fallthrough
		default:
			if pool == "" || v.Detail == "" || !strings.Contains(msg, v.Detail) {
				t.Fatalf("verdict %+v for pool %q is not a part of %q", v, pool, msg)
			}
		}
	})
}
