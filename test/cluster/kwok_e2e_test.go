//go:build e2e

package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestKwokLeavesProcessPodsAlone puts two pods on a kwok node: kwok makes
// the plain one Running with an IP from PodCIDR and leaves the one labelled
// ProcessPodLabel Pending. The test then plays that pod's kubelet: it
// writes the pod Running and Ready at an IP it puts on lo, serves a webhook
// there behind a Service and sees the API server call it through the
// endpoint. Deleted, the labelled pod stays (terminating) until the test
// removes it with a grace period of 0, as a kubelet would.
func TestKwokLeavesProcessPodsAlone(t *testing.T) {
	c := StartForTest(t, Options{Karpenter: true})
	ctx := t.Context()
	cl := c.Client()

	// A node kwok manages, made directly: nothing here needs Karpenter.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        "kwok-stages",
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		Labels:      map[string]string{corev1.LabelHostname: "kwok-stages", "type": "kwok"},
	}}
	mustCreate(t, cl, node)
	waitUntil(t, time.Minute, "node kwok-stages Ready", func() error {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", node.Status.Conditions)
	})

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kwok-stages"}}
	mustCreate(t, cl, ns)
	newPod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:   node.Name,
				Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			},
		}
	}
	plain := newPod("plain", nil)
	// The empty value counts as carrying the label.
	process := newPod("process", map[string]string{ProcessPodLabel: "", "app": "webhook"})
	mustCreate(t, cl, process)
	mustCreate(t, cl, plain)

	podCIDR := netip.MustParsePrefix(PodCIDR)
	waitUntil(t, time.Minute, "pod plain Running and Ready", func() error {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(plain), plain); err != nil {
			return err
		}
		if plain.Status.Phase != corev1.PodRunning || !podReady(plain) {
			return fmt.Errorf("phase %q, conditions %v", plain.Status.Phase, plain.Status.Conditions)
		}
		return nil
	})
	ip, err := netip.ParseAddr(plain.Status.PodIP)
	if err != nil || !podCIDR.Contains(ip) || netip.MustParsePrefix(serviceCIDR).Contains(ip) {
		t.Errorf("pod plain has IP %q, want one in %s and not in the Service range %s", plain.Status.PodIP, PodCIDR, serviceCIDR)
	}
	t.Logf("kwok made pod plain Running and Ready at %s", plain.Status.PodIP)

	// kwok handled plain; it had every chance to handle process as well.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(process), process); err != nil {
			t.Fatal(err)
		}
		if process.Status.Phase != corev1.PodPending || podReady(process) || process.Status.PodIP != "" {
			t.Fatalf("kwok touched pod process (labelled %s): phase %q, IP %q, conditions %v",
				ProcessPodLabel, process.Status.Phase, process.Status.PodIP, process.Status.Conditions)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("pod process stays %s with no IP and no Ready condition", process.Status.Phase)

	t.Run("webhook Service reached at the pod IP the test wrote", func(t *testing.T) {
		testServiceWebhookAtPodIP(t, c, process)
	})

	if err := cl.Delete(ctx, process); err != nil {
		t.Fatalf("deleting pod process: %v", err)
	}
	// kwok had every chance to remove it; the pod stays, terminating.
	deadline = time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(process), process); err != nil {
			t.Fatalf("pod process, deleted with its grace period: %v; kwok must leave its removal to the test", err)
		}
		if process.DeletionTimestamp == nil {
			t.Fatal("pod process has no deletion timestamp after its deletion")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := cl.Delete(ctx, process, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("removing pod process: %v", err)
	}
	waitUntil(t, time.Minute, "pod process gone", func() error {
		err := cl.Get(ctx, client.ObjectKeyFromObject(process), &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("still there")
	})
	t.Logf("the deleted pod process stayed until the test removed it")
}

// testServiceWebhookAtPodIP plays kubelet for pod: the webhook server runs
// in the test process on the pod's IP, put on lo, and the test writes the
// pod Running and Ready there. A Service selects the pod; the API server
// must reach the webhook registered by that Service through its endpoint.
func testServiceWebhookAtPodIP(t *testing.T, c *Cluster, pod *corev1.Pod) {
	ctx := t.Context()
	cl := c.Client()
	// In PodCIDR, far from the addresses kwok hands out from its start.
	const podIP, port = "10.244.200.1", 8443
	if err := c.AddLoopbackAddress(podIP); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook", Namespace: pod.Namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "webhook"},
			Ports:    []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(port)}},
		},
	}
	certFile, keyFile, err := c.IssueServingCert(t.TempDir(), svc.Name+"."+svc.Namespace+".svc")
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Listen("tcp", net.JoinHostPort(podIP, strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listening on the pod IP inside the namespace: %v", err)
	}
	wh := &allowAll{}
	srv := &http.Server{Handler: wh}
	go func() { _ = srv.ServeTLS(l, certFile, keyFile) }()
	defer srv.Close()

	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     podIP,
		PodIPs:    []corev1.PodIP{{IP: podIP}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Image: pod.Spec.Containers[0].Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	if err := cl.Status().Update(ctx, pod); err != nil {
		t.Fatalf("writing the status of pod %s: %v", pod.Name, err)
	}
	mustCreate(t, cl, svc)
	waitUntil(t, time.Minute, "a ready endpoint "+podIP+" for Service "+svc.Name, func() error {
		slices := &discoveryv1.EndpointSliceList{}
		if err := cl.List(ctx, slices, client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
			return err
		}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if len(e.Addresses) > 0 && e.Addresses[0] == podIP && e.Conditions.Ready != nil && *e.Conditions.Ready {
					return nil
				}
			}
		}
		return fmt.Errorf("endpoint slices %v", slices.Items)
	})

	target := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "service-webhook", Labels: map[string]string{"service-webhook": "on"}}}
	mustCreate(t, cl, target)
	path := "/validate"
	svcPort := int32(443)
	cfg := configMapWebhook("service-webhook", "service.apportion.dev", admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: svc.Namespace, Name: svc.Name, Path: &path, Port: &svcPort},
		CABundle: c.CABundle(),
	}, target)
	mustCreate(t, cl, cfg)
	defer func() { _ = cl.Delete(ctx, cfg) }()
	waitReviewed(t, cl, target, "the webhook behind Service "+svc.Name+" to be called", wh)
	if err := cl.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		t.Fatal(err)
	}
	t.Logf("the API server called the webhook of Service %s/%s (ClusterIP %s) at the pod IP %s:%d, %d time(s), for host %v",
		svc.Namespace, svc.Name, svc.Spec.ClusterIP, podIP, port, wh.calls.Load(), wh.host.Load())
}

func podReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
