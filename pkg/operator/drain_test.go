package operator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestDrainClosesConnections: over one keep-alive connection, responses
// keep it open until draining begins, then ask the client to close it.
func TestDrainClosesConnections(t *testing.T) {
	d := newDrain(clocktesting.NewFakeClock(time.Now()))
	srv := httptest.NewServer(d.handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })))
	defer srv.Close()
	// get returns whether the response closes its connection, and its
	// Connection header.
	get := func() (bool, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		return resp.Close, resp.Header.Get("Connection")
	}
	if closes, connection := get(); closes || connection != "" {
		t.Fatalf("before draining: Close %v, Connection %q; want the connection kept", closes, connection)
	}
	d.begin(context.Background(), "test")
	if closes, _ := get(); !closes {
		t.Fatal("while draining: the response does not close its connection")
	}
}

func TestDrainLeft(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	d := newDrain(clk)
	if got := d.left(); got != minimumDrain {
		t.Errorf("before draining: left %s, want %s", got, minimumDrain)
	}
	d.begin(context.Background(), "test")
	clk.Step(300 * time.Millisecond)
	d.begin(context.Background(), "again") // changes nothing
	if got := d.left(); got != minimumDrain-300*time.Millisecond {
		t.Errorf("300ms into draining: left %s, want %s", got, minimumDrain-300*time.Millisecond)
	}
	clk.Step(minimumDrain)
	if got := d.left(); got != 0 {
		t.Errorf("after draining %s: left %s, want 0", minimumDrain+300*time.Millisecond, got)
	}
}

// TestOwnPodBeginsDrain: draining begins when the replica's pod is being
// deleted, not before.
func TestOwnPodBeginsDrain(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apportion-system", Name: "apportion-abc", Finalizers: []string{"test/keep"}}}
	kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(pod).Build()
	clk := clocktesting.NewFakeClock(time.Now())
	d := newDrain(clk)
	o := &ownPod{reader: kube, drain: d, clk: clk, interval: time.Second, key: client.ObjectKeyFromObject(pod)}
	if o.NeedLeaderElection() {
		t.Fatal("the own-pod watch would run on the leader only")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.Start(ctx) }()
	for range 3 {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		if d.since.Load() != 0 {
			t.Fatal("draining before the pod's deletion")
		}
		clk.Step(time.Second)
	}
	if err := kube.Delete(ctx, pod); err != nil { // the finalizer keeps it, with a deletion timestamp
		t.Fatal(err)
	}
	clk.Step(time.Second)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not see the deletion")
	}
	if d.since.Load() == 0 {
		t.Fatal("not draining after the pod's deletion")
	}
}

// TestStopDrainsFirst: stopping the server begins draining, and the inner
// server stops only after that.
func TestStopDrainsFirst(t *testing.T) {
	d := newDrain(clocktesting.NewFakeClock(time.Now())) // frozen: drains minimumDrain of real time
	stopped := make(chan bool, 1)
	inner := &fakeServer{started: make(chan struct{})}
	inner.stopped = func() { stopped <- d.since.Load() != 0 }
	s := &startAfter{Server: inner, drain: d}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	<-inner.started
	cancel()
	select {
	case draining := <-stopped:
		if !draining {
			t.Fatal("the server stopped without draining first")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDrainFailsReadiness: a replica is ready until it begins to drain, and
// keeps serving for minimumDrain from then, the time the endpoints take to
// drop it.
func TestDrainFailsReadiness(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	d := newDrain(clk)
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	if err := d.notDraining(req); err != nil {
		t.Fatalf("not ready before draining: %v", err)
	}
	d.begin(context.Background(), "test")
	if err := d.notDraining(req); err == nil {
		t.Fatal("ready while draining")
	}
	if got := d.left(); got != minimumDrain {
		t.Fatalf("left %s at the start of draining, want %s", got, minimumDrain)
	}
	clk.Step(minimumDrain / 2)
	if got := d.left(); got != minimumDrain/2 {
		t.Fatalf("left %s halfway, want %s", got, minimumDrain/2)
	}
}
