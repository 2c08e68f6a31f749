package catalog

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// pool builds a NodePool: requirement values per key, optional weight,
// template labels, taints and the tolerate opt-in.
type poolSpec struct {
	name     string
	weight   int32
	reqs     map[string][]string
	labels   map[string]string
	taints   []corev1.Taint
	tolerate bool
}

func nodePool(s poolSpec) *karpv1.NodePool {
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: s.name}}
	if s.weight != 0 {
		np.Spec.Weight = &s.weight
	}
	if s.tolerate {
		np.Annotations = map[string]string{annotations.Tolerate: "true"}
	}
	np.Spec.Template.Labels = s.labels
	np.Spec.Template.Spec.Taints = s.taints
	for k, v := range s.reqs {
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, karpv1.NodeSelectorRequirementWithMinValues{
			Key: k, Operator: corev1.NodeSelectorOpIn, Values: v,
		})
	}
	return np
}

const ct, arch = karpv1.CapacityTypeLabelKey, corev1.LabelArchStable

var gpuTaint = corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}

func TestSelect(t *testing.T) {
	pools := []*karpv1.NodePool{
		nodePool(poolSpec{name: "od-amd64", weight: 10, reqs: map[string][]string{ct: {"on-demand"}, arch: {"amd64"}}}),
		nodePool(poolSpec{name: "od-arm64", weight: 20, reqs: map[string][]string{ct: {"on-demand"}, arch: {"arm64"}}}),
		nodePool(poolSpec{name: "spot-any", reqs: map[string][]string{ct: {"spot"}, arch: {"amd64", "arm64"}}}),
		nodePool(poolSpec{name: "spot-big", reqs: map[string][]string{ct: {"spot"}, arch: {"amd64"}}, labels: map[string]string{"nodesize": "big"}}),
		nodePool(poolSpec{name: "gpu", weight: 90, reqs: map[string][]string{ct: {"on-demand"}}, labels: map[string]string{"dedicated": "gpu"}, taints: []corev1.Taint{gpuTaint}}),
		nodePool(poolSpec{name: "gpu-optin", reqs: map[string][]string{ct: {"spot"}}, labels: map[string]string{"dedicated": "gpu"}, taints: []corev1.Taint{gpuTaint}, tolerate: true}),
	}
	deleting := nodePool(poolSpec{name: "zz-deleting", weight: 100, reqs: map[string][]string{ct: {"on-demand"}}})
	deleting.DeletionTimestamp = &metav1.Time{}
	c := New(append(pools, deleting))

	podWith := func(mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{}
		mod(p)
		return p
	}
	for _, tc := range []struct {
		name        string
		group       map[string]string
		pod         *corev1.Pod
		want        string
		tolerations int
		errPart     string
	}{
		{name: "highest weight wins among compatible pools, tainted pool not opted in is skipped",
			group: map[string]string{ct: "on-demand"}, want: "od-arm64"},
		{name: "group with two labels", group: map[string]string{ct: "on-demand", arch: "amd64"}, want: "od-amd64"},
		{name: "pool allowing several values serves each", group: map[string]string{ct: "spot", arch: "arm64"}, want: "spot-any"},
		{name: "equal weights: name later in the alphabet first (Karpenter's order)", group: map[string]string{ct: "spot"}, want: "spot-big"},
		{name: "custom label must be provided by the pool", group: map[string]string{"nodesize": "big"}, want: "spot-big"},
		{name: "pod constraints are ANDed: nodeSelector arch",
			group: map[string]string{ct: "on-demand"},
			pod:   podWith(func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{arch: "amd64"} }), want: "od-amd64"},
		{name: "pod that tolerates the taint may use the tainted pool",
			group: map[string]string{"dedicated": "gpu"},
			pod: podWith(func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
			}), want: "gpu"},
		{name: "opted-in tainted pool gets the tolerations added",
			group: map[string]string{"dedicated": "gpu", ct: "spot"}, want: "gpu-optin", tolerations: 1},
		{name: "tainted and not opted in: no pool",
			group: map[string]string{"dedicated": "gpu", ct: "on-demand"}, errPart: "gpu: tainted and not opted in"},
		{name: "label no pool has", group: map[string]string{"zone": "x"}, errPart: `label "zone" does not have known values`},
		{name: "pod constraint no pool meets",
			group: map[string]string{ct: "on-demand"},
			pod:   podWith(func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{arch: "s390x"} }), errPart: "pod:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			choice, err := c.Select(tc.group, tc.pod)
			if tc.errPart != "" {
				if err == nil || !errors.Is(err, ErrNoPool) || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("Select = %v, %v; want ErrNoPool containing %q", choice.Pool, err, tc.errPart)
				}
				return
			}
			if err != nil {
				t.Fatalf("Select: %v", err)
			}
			if choice.Pool.Name != tc.want || len(choice.Tolerations) != tc.tolerations {
				t.Fatalf("Select = %s with %d tolerations, want %s with %d", choice.Pool.Name, len(choice.Tolerations), tc.want, tc.tolerations)
			}
			for _, tol := range choice.Tolerations {
				if !tol.ToleratesTaint(klog.Background(), &gpuTaint, true) {
					t.Errorf("added toleration %+v does not tolerate %+v", tol, gpuTaint)
				}
			}
		})
	}
	if empty, err := New(nil).Select(map[string]string{ct: "spot"}, nil); err == nil {
		t.Errorf("empty catalog selected %v", empty.Pool)
	}
}

func TestSelectForArchitectures(t *testing.T) {
	c := New([]*karpv1.NodePool{
		nodePool(poolSpec{name: "od-amd64", weight: 30, reqs: map[string][]string{ct: {"on-demand"}, arch: {"amd64"}}}),
		nodePool(poolSpec{name: "od-arm64", weight: 20, reqs: map[string][]string{ct: {"on-demand"}, arch: {"arm64"}}}),
		nodePool(poolSpec{name: "spot-any", reqs: map[string][]string{ct: {"spot"}, arch: {"amd64", "arm64"}}}),
		nodePool(poolSpec{name: "any", labels: map[string]string{"team": "x"}}), // no arch requirement: Karpenter may launch any
	})
	for _, tc := range []struct {
		name    string
		group   map[string]string
		pod     *corev1.Pod
		archs   []string
		want    string
		archErr bool
	}{
		{name: "no architectures: the heaviest pool", group: map[string]string{ct: "on-demand"}, want: "od-amd64"},
		{name: "arm64-only images skip the amd64 pool", group: map[string]string{ct: "on-demand"}, archs: []string{"arm64"}, want: "od-arm64"},
		{name: "a pool allowing both serves either", group: map[string]string{ct: "spot"}, archs: []string{"arm64"}, want: "spot-any"},
		{name: "no group labels (architecture only)", group: map[string]string{}, archs: []string{"arm64"}, want: "od-arm64"},
		{name: "group naming an architecture the images lack", group: map[string]string{arch: "arm64"}, archs: []string{"amd64"}, archErr: true},
		{name: "group naming a supported architecture", group: map[string]string{arch: "arm64"}, archs: []string{"amd64", "arm64"}, want: "od-arm64"},
		{name: "the user's own arch constraint is ANDed, never widened",
			group: map[string]string{ct: "on-demand"}, archs: []string{"amd64", "arm64"},
			pod: &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{arch: "arm64"}}}, want: "od-arm64"},
		{name: "user's arch and the images' disjoint, even for a pool without an arch requirement",
			group: map[string]string{}, archs: []string{"amd64"},
			pod: &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{arch: "arm64"}}}, archErr: true},
		{name: "a pool without an arch requirement can serve any", group: map[string]string{"team": "x"}, archs: []string{"arm64"}, want: "any"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			choice, err := c.SelectFor(tc.group, tc.pod, tc.archs, nil)
			if tc.archErr {
				if !errors.Is(err, ErrArchitecture) {
					t.Fatalf("SelectFor = %v, %v; want ErrArchitecture", choice.Pool, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("SelectFor: %v", err)
			}
			if choice.Pool.Name != tc.want {
				t.Fatalf("SelectFor = %s, want %s", choice.Pool.Name, tc.want)
			}
		})
	}
}

func TestReadNodePools(t *testing.T) {
	const in = `apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: a}
spec:
  weight: 3
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
---
apiVersion: v1
kind: List
items:
- apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {name: b}
`
	nps, err := ReadNodePools(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(nps) != 2 || nps[0].Name != "a" || *nps[0].Spec.Weight != 3 || nps[1].Name != "b" ||
		len(nps[0].Spec.Template.Spec.Requirements) != 1 {
		t.Fatalf("ReadNodePools = %+v", nps)
	}
	for _, bad := range []string{"", "apiVersion: v1\nkind: ConfigMap\n", "{{{", "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {}\n"} {
		if _, err := ReadNodePools(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadNodePools(%q) succeeded", bad)
		}
	}
}

// TestNoPoolReasonsKeepThePoolsWithTheGroupsLabels: when some pool has the
// group's labels but cannot serve it (a taint not opted in), the error names
// that pool and only counts the pools without the labels; when none has
// them, every pool's reason is kept.
func TestNoPoolReasonsKeepThePoolsWithTheGroupsLabels(t *testing.T) {
	pool := func(name, capacityType string, taint bool) *karpv1.NodePool {
		np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: ct, Operator: corev1.NodeSelectorOpIn, Values: []string{capacityType}}}
		if taint {
			np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "spot", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		}
		return np
	}
	arm := pool("spot-arm", "spot", false)
	arm.Spec.Template.Spec.Requirements = append(arm.Spec.Template.Spec.Requirements, karpv1.NodeSelectorRequirementWithMinValues{Key: arch, Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}})
	c := New([]*karpv1.NodePool{pool("od-a", "on-demand", false), pool("od-b", "on-demand", false), pool("spot", "spot", true), arm})
	amd64 := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{arch: "amd64"}}}
	_, err := c.Select(map[string]string{ct: "spot"}, amd64)
	// The pool listed first in the catalog's order is spot-arm; the
	// tainted one, closest to serving the group, comes first all the same.
	if err == nil || !strings.HasPrefix(err.Error(), "no NodePool can serve the group: spot: tainted and not opted in") ||
		!strings.Contains(err.Error(), "; spot-arm: pod: ") ||
		!strings.HasSuffix(err.Error(), "; 2 other NodePools do not provide the group's labels") || strings.Contains(err.Error(), "od-a") {
		t.Fatalf("Select(spot) = %v", err)
	}
	// Without the taint's pool, the pool ruled out by the pod comes first.
	_, err = New([]*karpv1.NodePool{pool("od-a", "on-demand", false), arm}).Select(map[string]string{ct: "spot"}, amd64)
	if err == nil || !strings.Contains(err.Error(), "spot-arm: pod: ") || !strings.HasSuffix(err.Error(), "; 1 other NodePool does not provide the group's labels") {
		t.Fatalf("Select(spot), no tainted pool = %v", err)
	}
	_, err = c.Select(map[string]string{ct: "reserved"}, nil)
	if err == nil || !strings.Contains(err.Error(), "od-a: group: ") || !strings.Contains(err.Error(), "spot: group: ") || strings.Contains(err.Error(), "other NodePool") {
		t.Fatalf("Select(reserved) = %v", err)
	}
}

// TestUndefined: the keys no pool names, other than Karpenter's well-known
// labels, in the order asked; Unused names them before the error.
func TestUndefined(t *testing.T) {
	c := New([]*karpv1.NodePool{
		nodePool(poolSpec{name: "od", reqs: map[string][]string{ct: {"on-demand"}}}),
		nodePool(poolSpec{name: "big", labels: map[string]string{"nodesize": "big"}}),
	})
	got := c.Undefined("nodesiez", ct, "nodesize", arch, corev1.LabelTopologyZone, karpv1.NodePoolLabelKey, "example.com/team")
	if want := []string{"nodesiez", "example.com/team"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Undefined = %q, want %q", got, want)
	}
	_, err := c.Select(map[string]string{"nodesiez": "big"}, nil)
	err = Unused(err, c.Undefined("nodesiez"), "no NodePool")
	if !errors.Is(err, ErrNoPool) || !strings.HasPrefix(err.Error(), `label key "nodesiez" is on no NodePool (a typo?); no NodePool can serve the group: `) {
		t.Fatalf("Unused = %v", err)
	}
	if err := Unused(ErrNoPool, []string{"a", "b"}, "no node"); err.Error() != `label keys "a", "b" are on no node (typos?); no NodePool can serve the group` {
		t.Fatalf("Unused, two keys = %v", err)
	}
	if err := Unused(ErrNoPool, nil, "no node"); err != ErrNoPool { //nolint:errorlint // no key: the same error, not one wrapping it
		t.Fatalf("Unused, no key = %v", err)
	}
}
