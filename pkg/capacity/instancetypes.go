package capacity

import (
	"strconv"
	"strings"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/apportion-dev/apportion/pkg/catalog"
)

// What the cluster's state shows of the instance types a NodePool allows.
//
// Karpenter decides both of its NodePool-wide findings against its cloud
// provider's instance-type catalog: a limits finding says every instance
// type the pool allows is larger than what is left of a limit, and
// NoCompatibleInstanceTypes says the pool's requirements leave none of
// them. apportion cannot read that catalog: it lives inside Karpenter's
// process (on EKS it comes from EC2's API, which apportion has no access
// to). What it can read are the NodePool's requirements and the instance
// types Karpenter has launched (launched NodeClaims, of any pool, carry
// their type's name and labels and report its size). From these it takes
// only what they prove:
//
//   - a lower bound of the smallest instance type the pool allows: the
//     smallest of the types its requirements name (node.kubernetes.io/
//     instance-type In [...]) when every one of them has been launched, and
//     the bounds its requirements put on the provider's cpu and memory
//     labels (instanceSizeLabels). Where neither says anything, the smallest
//     allowed type is unknown: the pool's own launched nodes are no bound
//     (it may have launched only large ones and still allow small ones);
//   - that the pool allows no instance type: its requirements leave no value
//     of a label every instance type has, or they name their instance types,
//     each one has been launched, and the labels of each rule it out.
//
// Anything else is unknown, and unknown never backs a mark for every
// workload (a forged Event then moves at most its writer's own workload),
// nor leaves a pool out before placing.
type Allowance struct {
	// None: the requirements leave no instance type.
	None bool
	// Least is, per resource, no more than any allowed instance type has
	// ("nodes" 1); a resource it lacks has no known bound.
	Least corev1.ResourceList
}

// everyType are the labels every instance type has a value of: requirements
// that leave none of a key's values leave no instance type.
var everyType = []string{corev1.LabelInstanceTypeStable, corev1.LabelArchStable, corev1.LabelOSStable, corev1.LabelTopologyZone, karpv1.CapacityTypeLabelKey}

// typeLabelPrefixes name the labels the cloud providers give an instance
// type's own properties (not its offering's: zone and capacity type are
// where it was launched, not all it can be).
var typeLabelPrefixes = []string{"karpenter.k8s.aws/instance-", "karpenter.kwok.sh/instance-"}

// instanceSizeLabels are the providers' labels of an instance type's cpu
// and memory, and how their values read as quantities.
var instanceSizeLabels = []struct {
	key      string
	resource corev1.ResourceName
	parse    func(string) (resource.Quantity, bool)
}{
	{"karpenter.k8s.aws/instance-cpu", corev1.ResourceCPU, count},
	{"karpenter.k8s.aws/instance-memory", corev1.ResourceMemory, mebibytes},
	{"karpenter.kwok.sh/instance-cpu", corev1.ResourceCPU, quantity},
	{"karpenter.kwok.sh/instance-memory", corev1.ResourceMemory, quantity},
}

func count(v string) (resource.Quantity, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	return *resource.NewQuantity(n, resource.DecimalSI), err == nil
}

func mebibytes(v string) (resource.Quantity, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > 1<<43 {
		return resource.Quantity{}, false
	}
	return *resource.NewQuantity(n<<20, resource.BinarySI), true
}

func quantity(v string) (resource.Quantity, bool) {
	q, err := resource.ParseQuantity(v)
	return q, err == nil
}

// AllowedTypes is what the cluster's state shows of the instance types the
// NodePool's requirements allow (see Allowance); known are the launched
// instance types (KnownTypes).
func AllowedTypes(np *karpv1.NodePool, known map[string]*cloudprovider.InstanceType) Allowance {
	// The requirements as Karpenter builds its NodeClaim template.
	reqs := catalog.NewPool(np).Requirements
	for _, key := range everyType {
		if reqs.Has(key) && reqs.Get(key).Operator() == corev1.NodeSelectorOpDoesNotExist {
			return Allowance{None: true}
		}
	}
	var a Allowance
	if names := reqs.Get(corev1.LabelInstanceTypeStable); names.Operator() == corev1.NodeSelectorOpIn {
		a = namedTypes(known, names.Values(), reqs)
	}
	if a.None {
		return a
	}
	a.Least = atLeast(a.Least, sizeBounds(reqs))
	return a
}

// namedTypes is what the launched instance types tell of the pool that
// names its types: none when each is known and none meets reqs, and the
// least of those that do when each is known and has a size.
func namedTypes(known map[string]*cloudprovider.InstanceType, names []string, reqs scheduling.Requirements) Allowance {
	var least corev1.ResourceList
	sized, admitted := true, false
	for _, name := range names {
		it, ok := known[name]
		if !ok {
			return Allowance{}
		}
		// Karpenter's own test of an instance type against a template.
		if it.Requirements.Intersects(reqs) != nil {
			continue
		}
		admitted = true
		if len(it.Capacity) == 0 {
			sized = false
			continue
		}
		least = smaller(least, it.Capacity)
	}
	if !admitted {
		return Allowance{None: true}
	}
	if !sized {
		return Allowance{}
	}
	return Allowance{Least: least}
}

// KnownTypes are the instance types of the launched NodeClaims in claims
// (all of the cluster's, any pool's), by name: their own labels (name, architecture,
// operating system, the provider's instance-* labels) as Requirements, and
// as Capacity the least any of them reported: its allocatable, else its
// capacity (none when none reported a size). Either is no more than the
// capacity Karpenter's catalog gives the type, which is what its limits
// count (the allocatable is less by the kubelet's reservations, and kwok
// reports its pods' requests as a NodeClaim's capacity): a lower bound.
// NodeClaims are Karpenter's: tenants do not write them.
func KnownTypes(claims []karpv1.NodeClaim) map[string]*cloudprovider.InstanceType {
	known := map[string]*cloudprovider.InstanceType{}
	for i := range claims {
		nc := &claims[i]
		name := nc.Labels[corev1.LabelInstanceTypeStable]
		if name == "" || !nc.StatusConditions(status.WithObservedOnly()).Get(karpv1.ConditionTypeLaunched).IsTrue() {
			continue
		}
		it, ok := known[name]
		if !ok {
			it = &cloudprovider.InstanceType{Name: name, Requirements: scheduling.NewLabelRequirements(typeLabels(nc.Labels))}
			known[name] = it
		}
		size := nc.Status.Allocatable
		if len(size) == 0 {
			size = nc.Status.Capacity
		}
		if len(size) > 0 {
			it.Capacity = smaller(it.Capacity, size)
		}
	}
	return known
}

// typeLabels are the labels of a launched node that are its instance
// type's own.
func typeLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		switch k {
		case corev1.LabelInstanceTypeStable, corev1.LabelArchStable, corev1.LabelOSStable, corev1.LabelWindowsBuild:
			out[k] = v
			continue
		}
		for _, p := range typeLabelPrefixes {
			if strings.HasPrefix(k, p) {
				out[k] = v
			}
		}
	}
	return out
}

// sizeBounds are the least cpu and memory the requirements allow on the
// providers' size labels: the smallest of the values In allows, or the
// lower bound of Gt/Gte.
func sizeBounds(reqs scheduling.Requirements) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, l := range instanceSizeLabels {
		if !reqs.Has(l.key) {
			continue
		}
		r := reqs.Get(l.key)
		values := r.Values()
		if r.Operator() != corev1.NodeSelectorOpIn {
			nsr := r.NodeSelectorRequirement()
			if nsr.Operator != karpv1.NodeSelectorOpGte {
				continue
			}
			values = nsr.Values
		}
		var low *resource.Quantity
		for _, v := range values {
			if q, ok := l.parse(v); ok && (low == nil || q.Cmp(*low) < 0) {
				low = &q
			}
		}
		if have, ok := out[l.resource]; low != nil && (!ok || low.Cmp(have) > 0) {
			out[l.resource] = *low
		}
	}
	return out
}

// smaller is the least of each resource in have (nil: none yet) and in
// size; a resource one of them lacks is zero, and "nodes" is 1.
func smaller(have, size corev1.ResourceList) corev1.ResourceList {
	if have == nil {
		out := size.DeepCopy()
		out["nodes"] = resource.MustParse("1")
		return out
	}
	for name, q := range have {
		if name == "nodes" {
			continue
		}
		if c, ok := size[name]; !ok {
			have[name] = resource.Quantity{}
		} else if c.Cmp(q) < 0 {
			have[name] = c.DeepCopy()
		}
	}
	return have
}

// atLeast raises each resource of least (nil: nothing known) to its bound
// in bounds; "nodes" is 1, as every node counts one.
func atLeast(least, bounds corev1.ResourceList) corev1.ResourceList {
	out := least.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for name, b := range bounds {
		if have, ok := out[name]; !ok || b.Cmp(have) > 0 {
			out[name] = b.DeepCopy()
		}
	}
	out["nodes"] = resource.MustParse("1")
	return out
}
