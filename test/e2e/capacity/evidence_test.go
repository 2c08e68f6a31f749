//go:build e2e

package capacity_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/test/framework"
)

// (c) Karpenter's Events are hints. A tenant whose ServiceAccount may
// create Events in its own namespace forges each kind Karpenter writes:
// a limits FailedScheduling on its own pod that needs more cpu than any
// node has (placed in the spot pool by a real strategy), a
// NoCompatibleInstanceTypes about the spot pool, and a limits
// FailedScheduling naming each pending pod of another namespace's workload
// (its name and UID). The pool has almost all of its limits left. The
// tenant's own workload is marked out of spot (its pods' Event, scoped to
// it); the other namespace's workload scales up to its exact split, loses
// no pod, and no Event says the pool is out for every workload.
func TestForgedKarpenterEventsStayInTheirNamespace(t *testing.T) {
	t.Parallel()
	const pool = "evidence-spot"
	victimNS := newNamespace(t)
	tenantNS := victimNS + "-tenant"
	if err := env.Kube.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Kube.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}})
	})
	forger := eventWriter(t, tenantNS)
	victimPods := watchPods(t, victimNS)
	var np karpv1.NodePool
	if err := env.Kube.Get(t.Context(), client.ObjectKey{Name: pool}, &np); err != nil {
		t.Fatal(err)
	}

	victim := deployment(victimNS, "victim", "evidence", 2, "100m", nil)
	create(t, victim)
	oversized := deployment(tenantNS, "oversized", "evidence", 4, "500", nil)
	create(t, oversized)

	// Karpenter's own word on the tenant's spot pod (it fits no instance
	// type), then the forged one, newer.
	var own *corev1.Pod
	framework.WaitFor(t, time.Minute, "Karpenter's FailedScheduling on a tenant pod placed in "+pool, func() error {
		for _, p := range livePods(t, tenantNS, "oversized") {
			if p.Annotations[annotations.NodePool] != pool {
				continue
			}
			if evs := karpenterFailures(t, tenantNS, p.Name); len(evs) > 0 {
				own = &p
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
	forge(t, forger, podEvent(tenantNS, own.Name, own.UID, exceedLimits(pool)))
	scoped := eventsFor(t, tenantNS, "oversized", "CapacityUnavailable", 45*time.Second)
	if len(scoped) == 0 || !strings.Contains(scoped[0].Message, "NodePool "+pool+" gives this workload no capacity (limits: ") {
		t.Fatalf("the tenant's forged limits Event: CapacityUnavailable %v; want one for its own workload", messages(scoped))
	}
	t.Logf("the tenant's own workload: %s", scoped[0].Message)

	waitRunning(t, victimNS, "victim", 2, 2*time.Minute)
	// Karpenter's NodePool Events are in default, where the tenant may
	// write nothing; in its own namespace it may.
	poolEvent := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: tenantNS, GenerateName: pool + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "NodePool", APIVersion: "karpenter.sh/v1", Namespace: tenantNS, Name: pool, UID: np.UID},
		Reason:         "NoCompatibleInstanceTypes", Message: "NodePool requirements filtered out all compatible available instance types",
	}
	inDefault := poolEvent.DeepCopy()
	inDefault.Namespace, inDefault.InvolvedObject.Namespace = metav1.NamespaceDefault, ""
	stampKarpenter(inDefault)
	if err := forger.Create(t.Context(), inDefault); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant writing an Event in default: %v, want Forbidden", err)
	}

	// While the victim scales up, every pending pod of it gets a forged
	// limits Event naming it, in the tenant's namespace.
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var mu sync.Mutex
	forged := map[types.UID]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			var list corev1.PodList
			if err := env.Kube.List(ctx, &list, client.InNamespace(victimNS)); err == nil {
				for _, p := range list.Items {
					mu.Lock()
					done := forged[p.UID]
					mu.Unlock()
					if done || p.Spec.NodeName != "" || !unschedulable(&p) {
						continue
					}
					ev := podEvent(tenantNS, p.Name, p.UID, exceedLimits(pool))
					stampKarpenter(ev)
					if forger.Create(ctx, ev) == nil {
						mu.Lock()
						forged[p.UID] = true
						mu.Unlock()
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	forge(t, forger, poolEvent)
	start := time.Now()
	scale(t, victim, 10)
	running := waitRunning(t, victimNS, "victim", 10, 2*time.Minute)
	elapsed := time.Since(start)
	stop()
	wg.Wait()

	want := expected(t, 10)
	if got := countByNode(t, "evidence", running); got[onDemand] != want[onDemand] || got[spot] != want[spot] {
		t.Errorf("victim counts by node %v, want exactly %v", got, want)
	}
	if fb := checkFallbackPods(t, "evidence", running); len(fb) > 0 {
		t.Errorf("victim fallback pods %v: spot was left out for it", names(fb))
	}
	if deleted := victimPods.Deleted(); len(deleted) > 0 {
		t.Errorf("victim pods deleted: %v", deleted)
	}
	if len(forged) == 0 {
		t.Error("no victim pod was pending long enough to forge an Event about it: the case checked nothing")
	}
	var all corev1.EventList
	if err := env.Kube.List(t.Context(), &all); err != nil {
		t.Fatal(err)
	}
	for _, e := range all.Items {
		if e.Reason != "CapacityUnavailable" || !strings.Contains(e.Message, "NodePool "+pool) {
			continue
		}
		if e.Namespace == victimNS || strings.Contains(e.Message, "NodePool "+pool+" cannot get capacity") {
			t.Errorf("CapacityUnavailable on %s/%s: %q", e.Namespace, e.InvolvedObject.Name, e.Message)
		}
	}
	t.Logf("victim 2 -> 10 all Running %s after the scale-up, counts by node %v; %d of its pods named in forged Events",
		round(elapsed), countByNode(t, "evidence", running), len(forged))
}

// eventWriter is a client acting as a ServiceAccount of ns that may create
// Events there and nothing else.
func eventWriter(t *testing.T, ns string) client.Client {
	t.Helper()
	create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forger"}})
	create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forger"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}}})
	create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forger"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "forger"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "forger"}}})
	cfg := rest.CopyConfig(env.C.RESTConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":forger"}
	c, err := client.New(cfg, client.Options{Scheme: env.Kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// podEvent is a FailedScheduling Event in ns about the pod name/uid.
func podEvent(ns, name string, uid types.UID, message string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, GenerateName: name + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: uid},
		Reason:         "FailedScheduling", Message: message,
	}
}

// stampKarpenter makes ev look like Karpenter's, happening now.
func stampKarpenter(ev *corev1.Event) {
	now := metav1.Now()
	ev.Source = corev1.EventSource{Component: "karpenter"}
	ev.Type = corev1.EventTypeWarning
	ev.FirstTimestamp, ev.LastTimestamp, ev.Count = now, now, 1
}

// forge writes ev as Karpenter would have.
func forge(t *testing.T, c client.Client, ev *corev1.Event) {
	t.Helper()
	stampKarpenter(ev)
	if err := c.Create(t.Context(), ev); err != nil {
		t.Fatalf("forging %s about %s %s: %v", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, err)
	}
}

func exceedLimits(pool string) string {
	return "Failed to schedule pod, all available instance types exceed limits for nodepool (NodePool=" + pool + ")"
}

// karpenterFailures are the FailedScheduling Events Karpenter wrote on the
// pod ns/name.
func karpenterFailures(t *testing.T, ns, name string) []corev1.Event {
	t.Helper()
	return framework.Events(t, env.Kube, ns, 0, func(e *corev1.Event) bool {
		return e.InvolvedObject.Name == name && e.Reason == "FailedScheduling" && e.Source.Component == "karpenter"
	})
}

// unschedulable: the scheduler found the pod no node.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}
