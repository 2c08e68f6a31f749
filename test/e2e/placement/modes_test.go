//go:build e2e

package placement_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/test/cluster"
	"github.com/apportion-dev/apportion/test/framework"
)

// TestNodeLabelModeWithoutKarpenter: on a cluster without the NodePool CRD
// (managed node groups, seed 000), groups are served by nodes that carry
// their labels.
func TestNodeLabelModeWithoutKarpenter(t *testing.T) {
	c := cluster.StartForTest(t, cluster.Options{})
	kube := c.Client()
	ctx := t.Context()
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: framework.SystemNamespace}}); err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(t.TempDir(), "certs")
	if err := os.MkdirAll(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.IssueServingCert(certs); err != nil {
		t.Fatal(err)
	}
	// Nodes of three managed node groups, labelled as in seed 000, made
	// Ready by hand (no kubelet: the scheduler binds to them all the same
	// until the node controller's grace period ends).
	addNode := func(name, size string) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"nodesize": size, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}}
		if err := kube.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "node "+node.Name+" Ready", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
				return err
			}
			node.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
			node.Status.Allocatable = node.Status.Capacity
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
			return kube.Status().Update(ctx, node)
		})
	}
	for _, size := range []string{"od4vcpu16gb", "spot4vcpu16gb", "spot8vcpu32gb"} {
		for i := range 2 {
			addNode(fmt.Sprintf("%s-%d", size, i), size)
		}
	}
	r, err := framework.StartReplica(c, env.bin, certs, "apportion-nodelabel", gateTimeout, "--leader-elect=false", "--api-check-interval=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if err := framework.Register(ctx, kube, c.CABundle(), r.Port); err != nil {
		t.Fatal(err)
	}
	// bound waits until the Deployment named app has n pods, all decided and
	// bound, and returns them.
	bound := func(app string, n int) []corev1.Pod {
		var pods corev1.PodList
		waitFor(t, 90*time.Second, fmt.Sprintf("%d decided, bound pods of %s", n, app), func() error {
			if err := kube.List(ctx, &pods, client.InNamespace("seed000"), client.MatchingLabels{"app": app}); err != nil {
				return err
			}
			bound := 0
			for i := range pods.Items {
				if decision.Decided(&pods.Items[i]) && pods.Items[i].Spec.NodeName != "" {
					bound++
				}
			}
			if bound != n || len(pods.Items) != n {
				return fmt.Errorf("%d of %d pods decided and bound", bound, len(pods.Items))
			}
			return nil
		})
		return pods.Items
	}
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "seed000"}}); err != nil {
		t.Fatal(err)
	}
	// A node group that appears later: while no node has nodesize=later
	// its group is left out; once a node has it, the next pods go there.
	const withLater = "nodesize=later,weight=1:nodesize=spot4vcpu16gb,weight=1"
	later := deployment("seed000", "later", 2, map[string]string{annotations.Strategy: withLater})
	if err := kube.Create(ctx, later); err != nil {
		t.Fatal(err)
	}
	if c := groupCounts(bound("later", 2)); c["nodesize=spot4vcpu16gb"] != 2 {
		t.Errorf("before the node exists: counts %v, want both on spot4vcpu16gb", c)
	}
	addNode("later-0", "later")
	waitFor(t, 30*time.Second, "scaling later to 4", func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(later), later); err != nil {
			return err
		}
		later.Spec.Replicas = ptr.To[int32](4)
		return kube.Update(ctx, later)
	})
	if c := groupCounts(bound("later", 4)); c["nodesize=later"] != 2 || c["nodesize=spot4vcpu16gb"] != 2 {
		t.Errorf("after a node with nodesize=later joined: counts %v, want 2 and 2", c)
	}

	const seed000 = "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1"
	d := deployment("seed000", "alpine", 10, nil, func(d *appsv1.Deployment) {
		d.Spec.Template.Annotations = map[string]string{annotations.LegacyEnabled: "true", annotations.LegacyCamelStrategy: seed000}
	})
	if err := kube.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	pods := corev1.PodList{Items: bound("alpine", 10)}
	counts := groupCounts(pods.Items)
	if counts["nodesize=od4vcpu16gb"] != 1 || counts["nodesize=spot4vcpu16gb"] != 5 || counts["nodesize=spot8vcpu32gb"] != 4 {
		t.Errorf("counts %v, want 1 / 5 / 4", counts)
	}
	for _, p := range pods.Items {
		if want := "nodesize=" + p.Spec.NodeName[:len(p.Spec.NodeName)-2]; want != p.Annotations[annotations.Group] {
			t.Errorf("pod %s of group %s bound to %s", p.Name, p.Annotations[annotations.Group], p.Spec.NodeName)
		}
		if p.Annotations[annotations.NodePool] != "" {
			t.Errorf("pod %s names a NodePool in node-label mode", p.Name)
		}
	}

	// Karpenter installed after apportion: the replica exits so that its
	// restart (by the Deployment, in a real cluster) comes up in Karpenter
	// mode.
	crd := filepath.Join(filepath.Dir(c.BinDir()), "crds", "karpenter.sh_nodepools.yaml")
	if err := framework.Apply(ctx, kube, crd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "apportion to exit after the NodePool CRD appeared", func() error {
		if !r.Exited() {
			return fmt.Errorf("still running")
		}
		return nil
	})
	if log := tailLog(c, "apportion-nodelabel", 5); !strings.Contains(log, "the NodePool API (karpenter.sh/v1) is now served") {
		t.Errorf("apportion exited without saying why; log tail:\n%s", log)
	}
}

// TestBurst1000Ratio measures a 0 -> 1,000 scale: the time until every pod
// is scheduled, without apportion and with it, from no spare capacity each
// time. It reports; it does not assert on time.
func TestBurst1000Ratio(t *testing.T) {
	replicas := startReplicas(t, 1)
	run := func(label string, ignore bool) time.Duration {
		labels := map[string]string{}
		if ignore {
			labels[framework.IgnoreLabel] = "true"
		}
		ns := newNamespace(t, labels)
		d := deployment(ns, "burst", 0, map[string]string{annotations.Strategy: seed004}, smallRequests)
		create(t, d)
		start := time.Now()
		scale(t, d, 1000)
		var decidedAt time.Duration
		waitFor(t, 10*time.Minute, label+": 1000 scheduled pods", func() error {
			pods := livePods(t, ns, "burst")
			scheduled, decided := 0, 0
			for i := range pods {
				if pods[i].Spec.NodeName != "" {
					scheduled++
				}
				if decision.Decided(&pods[i]) {
					decided++
				}
			}
			if decided == 1000 && decidedAt == 0 {
				decidedAt = time.Since(start)
			}
			if len(pods) != 1000 || scheduled != 1000 {
				return fmt.Errorf("%d pods, %d scheduled, %d decided", len(pods), scheduled, decided)
			}
			return nil
		})
		took := time.Since(start)
		if !ignore {
			checkQuota(t, groupCounts(livePods(t, ns, "burst")), label)
			t.Logf("%s: every pod decided after %.1fs", label, decidedAt.Seconds())
		}
		t.Logf("%s: 0 -> 1000, every pod scheduled after %.1fs", label, took.Seconds())
		freeCapacity(t, d)
		return took
	}
	without := run("without apportion", true)
	with := run("with apportion", false)
	t.Logf("0 -> 1000 burst: with/without apportion = %.2f (%.1fs / %.1fs)", with.Seconds()/without.Seconds(), with.Seconds(), without.Seconds())
	text, err := replicas[0].Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		bound, count := histogramQuantile(text, "apportion_admission_duration_seconds", q)
		t.Logf("admission, server side, over %d pod admissions (2 shared cores, whole cluster busy): p%g <= %gs (histogram bucket bound)", count, q*100, bound)
	}
}

// freeCapacity scales d to 0 and removes every NodeClaim, and waits until
// the pods and nodes are gone: the next burst starts from no spare capacity.
func freeCapacity(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	scale(t, d, 0)
	waitFor(t, 5*time.Minute, "pods gone", func() error {
		if n := len(livePods(t, d.Namespace, d.Name)); n != 0 {
			return fmt.Errorf("%d pods left", n)
		}
		return nil
	})
	if err := env.kube.DeleteAllOf(t.Context(), &karpv1.NodeClaim{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Minute, "nodes gone", func() error {
		var nodes corev1.NodeList
		if err := env.kube.List(t.Context(), &nodes); err != nil {
			return err
		}
		if len(nodes.Items) != 0 {
			return fmt.Errorf("%d nodes left", len(nodes.Items))
		}
		return nil
	})
}

// histogramQuantile returns the upper bound of the bucket that holds the q
// quantile of a Prometheus histogram, and the observation count.
func histogramQuantile(text, name string, q float64) (float64, int) {
	type bucket struct {
		le    float64
		count int
	}
	var buckets []bucket
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"_bucket{") {
			continue
		}
		_, le, ok := strings.Cut(line, `le="`)
		if !ok {
			continue
		}
		le, _, _ = strings.Cut(le, `"`)
		bound, err := strconv.ParseFloat(le, 64)
		if err != nil {
			bound = math.Inf(1)
		}
		fields := strings.Fields(line)
		n, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		buckets = append(buckets, bucket{bound, int(n)})
	}
	if len(buckets) == 0 {
		return math.NaN(), 0
	}
	total := buckets[len(buckets)-1].count
	for _, b := range buckets {
		if float64(b.count) >= q*float64(total) {
			return b.le, total
		}
	}
	return math.Inf(1), total
}
