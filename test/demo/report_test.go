package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

func node(name, pool, capacity, arch string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"karpenter.sh/nodepool": pool, "karpenter.sh/capacity-type": capacity, "kubernetes.io/arch": arch,
	}}}
}

// pods returns n Running pods on node; group, when set, is apportion's
// decision annotation.
func pods(n int, node, group string) []corev1.Pod {
	out := make([]corev1.Pod, n)
	for i := range out {
		out[i].Spec.NodeName = node
		out[i].Status.Phase = corev1.PodRunning
		if group != "" {
			out[i].Annotations = map[string]string{annotations.Group: group}
		}
	}
	return out
}

func TestBuildSection(t *testing.T) {
	const (
		od   = "karpenter.sh/capacity-type=on-demand"
		spot = "karpenter.sh/capacity-type=spot"
		arm  = "kubernetes.io/arch=arm64"
	)
	nodes := map[string]*corev1.Node{
		"od-1":   node("od-1", "on-demand-amd64", "on-demand", "amd64"),
		"spot-1": node("spot-1", "spot-amd64", "spot", "amd64"),
		"spot-2": node("spot-2", "spot-amd64", "spot", "amd64"),
		"arm-1":  node("arm-1", "spot-arm64", "spot", "arm64"),
		"od-2":   node("od-2", "od4vcpu16gb", "on-demand", "amd64"),
	}
	cat := func(ps ...[]corev1.Pod) []corev1.Pod {
		var out []corev1.Pod
		for _, p := range ps {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name     string
		strategy string
		pods     []corev1.Pod
		want     []string // "group pods want mark" per row
		off      int
	}{
		{
			name:     "exact split (seed 004 at 10)",
			strategy: od + ",base=2,weight=1:" + spot + ",weight=3",
			pods:     cat(pods(4, "od-1", od), pods(3, "spot-1", spot), pods(3, "spot-2", spot)),
			want:     []string{od + " 4 4 ✓", spot + " 6 6 ✓"},
		},
		{
			name:     "counts come from the nodes, not the annotation",
			strategy: od + ",base=2,weight=1:" + spot + ",weight=3",
			// Two pods claim on-demand but run on spot nodes.
			pods: cat(pods(2, "od-1", od), pods(2, "spot-1", od), pods(6, "spot-2", spot)),
			want: []string{od + " 2 4 ✗", spot + " 8 6 ✗"},
			off:  1,
		},
		{
			name:     "right count on the wrong NodePool",
			strategy: od + ",weight=1",
			pods:     cat(pods(1, "od-1", od), pods(1, "od-2", od)),
			want:     []string{od + " 2 2 ✗"},
			off:      1,
		},
		{
			name:     "pods outside every group and pods not scheduled",
			strategy: od + ",weight=1",
			pods:     cat(pods(1, "od-1", od), pods(1, "spot-1", ""), pods(1, "", "")),
			want:     []string{od + " 1 3 ✗", noGroup + " 1 0 ✗", notScheduled + " 1 0 ✗"},
			off:      1,
		},
		{
			name:     "after a scale-down: the other side of a fractional share is within quota",
			strategy: od + ",base=2,weight=1:" + spot + ",weight=3",
			// 7 pods: on-demand 3.25, spot 3.75; scaling up gives 3/4, a
			// scale-down may end on 4/3, both within floor..ceil.
			pods: cat(pods(4, "od-1", od), pods(3, "spot-1", spot)),
			want: []string{od + " 4 3-4 ✓", spot + " 3 3-4 ✓"},
		},
		{
			name:     "off quota",
			strategy: od + ",base=2,weight=1:" + spot + ",weight=3",
			pods:     cat(pods(5, "od-1", od), pods(2, "spot-1", spot)),
			want:     []string{od + " 5 3-4 ✗", spot + " 2 3-4 ✗"},
			off:      1,
		},
		{
			name:     "a node in two groups counts for the decided one",
			strategy: spot + ",weight=1:" + arm + ",weight=1",
			pods:     cat(pods(1, "arm-1", arm), pods(1, "spot-1", spot)),
			want:     []string{spot + " 1 1 ✓", arm + " 1 1 ✓"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := strategy.Parse(tt.strategy)
			if err != nil {
				t.Fatal(err)
			}
			want, err := plan.Compute(s, len(tt.pods))
			if err != nil {
				t.Fatal(err)
			}
			// What plan.ComputeWith says with the sample NodePools.
			for i, g := range s.Groups {
				want.Details[i].NodePool = map[string]string{od: "on-demand-amd64", spot: "spot-amd64", arm: "spot-arm64"}[g.Key()]
			}
			sec := buildSection("ns/app", len(tt.pods), s, want, tt.pods, nodes)
			var got []string
			for _, r := range sec.rows {
				mark := "✓"
				if !r.ok() {
					mark = "✗"
				}
				got = append(got, fmt.Sprintf("%s %d %s %s", r.group, r.pods, r.wantText(), mark))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			var buf bytes.Buffer
			off, err := render(&buf, []section{sec})
			if err != nil {
				t.Fatal(err)
			}
			if off != tt.off {
				t.Errorf("render says %d Deployments off, want %d:\n%s", off, tt.off, buf.String())
			}
			t.Logf("\n%s", buf.String())
		})
	}
}
