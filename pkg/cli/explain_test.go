package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/pkg/test"
)

// explainCluster is a Deployment shop/web of 10 replicas with the on-demand
// base 2 + 1:3 strategy, 3 pods decided on-demand and 7 spot, all Running.
func explainCluster(t *testing.T) *explain.Cluster {
	t.Helper()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "d", Annotations: map[string]string{annotations.Strategy: odSpotStrategy}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(10)), Selector: sel}}
	rs := test.ReplicaSet(metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "rs", Labels: map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: "h1"},
		Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}}, d)
	objs := []client.Object{d, rs,
		test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: "od"}, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement("karpenter.sh/capacity-type", "on-demand")}}),
		test.NodePool(test.NodePoolOptions{ObjectMeta: metav1.ObjectMeta{Name: "spot"}, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{test.Requirement("karpenter.sh/capacity-type", "spot")}}),
		test.Node("n-od", map[string]string{"karpenter.sh/capacity-type": "on-demand"}),
		test.Node("n-spot", map[string]string{"karpenter.sh/capacity-type": "spot"}),
	}
	for i := range 10 {
		group, node := "karpenter.sh/capacity-type=spot", "n-spot"
		if i < 3 {
			group, node = "karpenter.sh/capacity-type=on-demand", "n-od"
		}
		objs = append(objs, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("web-1-%d", i), UID: types.UID(fmt.Sprint(i)),
			Labels: map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: "h1"}}, Owner: rs, NodeName: node, Phase: corev1.PodRunning, Group: group}))
	}
	c := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(objs...).Build()
	return &explain.Cluster{Reader: c, Capacity: &capacity.NodePoolCapacity{Reader: c}, NodePools: true}
}

const odSpotStrategy = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// TestExplainOutput: the table names the numbers, JSON carries them.
func TestExplainOutput(t *testing.T) {
	cl := explainCluster(t)
	ctx := context.Background()
	var out bytes.Buffer
	if err := runExplain(ctx, cl, explain.Ref{Kind: "Deployment", Namespace: "shop", Name: "web"}, outputTable, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Workload:  Deployment shop/web", "Mode:      required (the install's default)", "Split:     off its strategy",
		"drift:   group 1 (karpenter.sh/capacity-type=on-demand) has 3 running, its quota at 10 running is 4",
		"karpenter.sh/capacity-type=on-demand  od        4        3        4          3        0",
		"Pods:          10 live: 10 decided", "Next 10 pods:  on-demand, ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := runExplain(ctx, cl, explain.Ref{Kind: "Pod", Namespace: "shop", Name: "web-1-0"}, outputJSON, &out); err != nil {
		t.Fatal(err)
	}
	var pod explain.PodReport
	if err := json.Unmarshal(out.Bytes(), &pod); err != nil {
		t.Fatal(err)
	}
	if pod.State != explain.StatePlaced || pod.NodeGroup != "karpenter.sh/capacity-type=on-demand" || pod.Workload.Groups[1].Actual != 7 {
		t.Fatalf("pod JSON: %s", out.String())
	}
	if err := runExplain(ctx, cl, explain.Ref{Kind: "Pod", Namespace: "shop", Name: "absent"}, outputTable, &out); err == nil || !strings.Contains(err.Error(), "pod/absent not found in namespace shop") {
		t.Fatalf("absent pod: %v", err)
	}
}

func TestStatusOutput(t *testing.T) {
	reports, err := explainCluster(t).Status(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeStatus(&out, reports, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("a header and one workload:\n%s", out.String())
	}
	fields := strings.Fields(lines[1])
	want := []string{"shop", "deployment/web", "required", "10", "on-demand/spot", "4/6", "3/7", "3/7", "✗"}
	for i, w := range want {
		if i >= len(fields) || fields[i] != w {
			t.Fatalf("row %q, want %q", fields, want)
		}
	}
	if !strings.Contains(lines[1], "od/spot") || !strings.Contains(lines[1], odSpotStrategy) {
		t.Fatalf("wide lacks pools or strategy: %s", lines[1])
	}
	out.Reset()
	if err := writeStatus(&out, nil, false); err != nil || out.String() != "No placed workloads found.\n" {
		t.Fatalf("empty: %q %v", out.String(), err)
	}
}

func TestProgramFor(t *testing.T) {
	for argv0, want := range map[string]string{"/usr/local/bin/kubectl-apportion": "kubectl apportion", "apportion": "apportion", "./bin/apportion": "apportion"} {
		if got := ProgramFor(argv0); got != want {
			t.Errorf("%s: %s, want %s", argv0, got, want)
		}
	}
	saved := Program
	defer func() { Program = saved }()
	Program = "kubectl apportion"
	code, out, _ := run(t, "", "explain", "--help")
	if code != ExitOK || !strings.Contains(out, "Usage:\n  kubectl apportion explain") {
		t.Fatalf("as a plugin, help names kubectl apportion: %d\n%s", code, out)
	}
}

// TestForbiddenNamesWhatIsRead: a refused read says what explain needs.
func TestForbiddenNamesWhatIsRead(t *testing.T) {
	cl := explainCluster(t)
	cl.Reader = interceptor.NewClient(cl.Reader.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Namespace == "" { // a node
				return apierrors.NewForbidden(corev1.Resource("nodes"), key.Name, errors.New("no access"))
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	err := runExplain(context.Background(), cl, explain.Ref{Kind: "Deployment", Namespace: "shop", Name: "web"}, outputTable, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "kubectl auth can-i list nodes") {
		t.Fatalf("a forbidden node read: %v", err)
	}
}
