package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/catalog"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// waitRunning waits until every example Deployment has exactly its replicas
// Running, printing progress: one line rewritten in place on a terminal, a
// line every 10 s otherwise (make's output in CI).
func waitRunning(ctx context.Context, kube client.Client, workloads []*plan.Workload, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tty := isTerminal(os.Stderr)
	t0 := time.Now()
	var lastPrint time.Time
	for {
		done := true
		var parts []string
		for _, w := range workloads {
			pods, err := livePods(ctx, kube, w)
			if ctx.Err() != nil {
				return fmt.Errorf("pods not all Running after %s", timeout)
			}
			if err != nil {
				return err
			}
			running := 0
			for _, p := range pods {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			want := int(*w.Replicas)
			done = done && running == want && len(pods) == want
			parts = append(parts, fmt.Sprintf("%s/%s %d/%d", w.Namespace, w.Name, running, want))
		}
		line := fmt.Sprintf("waiting for the pods to run: %s Running (%s)", strings.Join(parts, ", "), time.Since(t0).Round(time.Second))
		switch {
		case done:
			if tty {
				fmt.Fprint(os.Stderr, "\r\033[K")
			}
			say(fmt.Sprintf("all pods Running: %s (%s)", strings.Join(parts, ", "), time.Since(t0).Round(100*time.Millisecond)))
			return nil
		case tty:
			fmt.Fprint(os.Stderr, "\r\033[Kdemo: "+line)
		case time.Since(lastPrint) >= 10*time.Second:
			say(line)
			lastPrint = time.Now()
		}
		select {
		case <-ctx.Done():
			if tty {
				fmt.Fprintln(os.Stderr)
			}
			return fmt.Errorf("pods not all Running after %s: %s", timeout, strings.Join(parts, ", "))
		case <-time.After(time.Second):
		}
	}
}

// livePods are the Deployment's pods that count: not terminating, not
// finished.
func livePods(ctx context.Context, kube client.Client, w *plan.Workload) ([]corev1.Pod, error) {
	var d appsv1.Deployment
	if err := kube.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: w.Name}, &d); err != nil {
		return nil, fmt.Errorf("reading Deployment %s/%s: %w", w.Namespace, w.Name, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("reading the selector of %s/%s: %w", w.Namespace, w.Name, err)
	}
	var list corev1.PodList
	if err := kube.List(ctx, &list, client.InNamespace(w.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing pods of %s/%s: %w", w.Namespace, w.Name, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out, nil
}

// collect reads, for each Deployment, its pods and their nodes from the
// cluster, and the split its strategy asks for from the engine, given the
// NodePools in the cluster (a group no pool serves gets nothing, as in the
// webhook).
func collect(ctx context.Context, kube client.Client, workloads []*plan.Workload) ([]section, error) {
	var nodeList corev1.NodeList
	if err := kube.List(ctx, &nodeList); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make(map[string]*corev1.Node, len(nodeList.Items))
	for i := range nodeList.Items {
		nodes[nodeList.Items[i].Name] = &nodeList.Items[i]
	}
	var poolList karpv1.NodePoolList
	if err := kube.List(ctx, &poolList); err != nil {
		return nil, fmt.Errorf("listing NodePools: %w", err)
	}
	pools := make([]*karpv1.NodePool, len(poolList.Items))
	for i := range poolList.Items {
		pools[i] = &poolList.Items[i]
	}
	cat := catalog.New(pools)

	var out []section
	for _, w := range workloads {
		var d appsv1.Deployment
		if err := kube.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: w.Name}, &d); err != nil {
			return nil, fmt.Errorf("reading Deployment %s/%s: %w", w.Namespace, w.Name, err)
		}
		pods, err := livePods(ctx, kube, w)
		if err != nil {
			return nil, err
		}
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		s, want, note := wanted(&d, replicas, cat)
		sec := buildSection(w.Namespace+"/"+w.Name, replicas, s, want, pods, nodes)
		sec.note = note
		out = append(out, sec)
	}
	return out, nil
}

// wanted is the split the Deployment's strategy (as stored in the cluster)
// asks for at its replicas; note says why there is none.
func wanted(d *appsv1.Deployment, replicas int, cat *catalog.Catalog) (*strategy.Strategy, *plan.Result, string) {
	raw, _, ok := strategy.Find(d.Annotations, d.Spec.Template.Annotations)
	if !ok {
		return nil, nil, "no strategy annotation"
	}
	s, err := strategy.Parse(raw)
	if err != nil {
		return nil, nil, "invalid strategy: " + err.Error()
	}
	pod := &corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: d.Spec.Template.Spec}
	want, err := plan.ComputeWith(s, replicas, plan.Options{Catalog: cat, Pod: pod})
	if err != nil {
		return s, nil, "no plan: " + err.Error()
	}
	return s, want, ""
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
