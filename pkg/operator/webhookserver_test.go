package operator

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// fakeServer records whether Start was called, and calls stopped (when set)
// once its context ends.
type fakeServer struct {
	started chan struct{}
	stopped func()
}

func (f *fakeServer) Register(string, http.Handler)   {}
func (f *fakeServer) StartedChecker() healthz.Checker { return healthz.Ping }
func (f *fakeServer) WebhookMux() *http.ServeMux      { return http.NewServeMux() }
func (f *fakeServer) NeedLeaderElection() bool        { return false }
func (f *fakeServer) Start(ctx context.Context) error {
	close(f.started)
	<-ctx.Done()
	if f.stopped != nil {
		f.stopped()
	}
	return nil
}

func TestWebhookServerStartsOnceReady(t *testing.T) {
	ready := make(chan struct{})
	inner := &fakeServer{started: make(chan struct{})}
	var s webhook.Server = &startAfter{Server: inner, ready: ready}
	if _, ok := s.(interface{ GetCache() cache.Cache }); ok {
		t.Fatal("the wrapper would be filed with the caches")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	select {
	case <-inner.started:
		t.Fatal("started before the certificate was ready")
	case <-time.After(50 * time.Millisecond):
	}
	close(ready)
	select {
	case <-inner.started:
	case <-time.After(10 * time.Second):
		t.Fatal("not started once ready")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

func TestWebhookServerNeverReadyStopsWithContext(t *testing.T) {
	inner := &fakeServer{started: make(chan struct{})}
	s := &startAfter{Server: inner, ready: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Start(ctx); err != nil {
		t.Errorf("Start: %v", err)
	}
	select {
	case <-inner.started:
		t.Error("the inner server started without a certificate")
	default:
	}
	// Without a rotator it starts at once.
	s = &startAfter{Server: &fakeServer{started: make(chan struct{})}}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	select {
	case <-s.Server.(*fakeServer).started:
	case <-ctx.Done():
		t.Error("not started without a rotator")
	}
}

// TestWebhookServerStopsLast runs a manager (with no API server: nothing
// here calls it) and checks that the wrapped server is told to stop only
// after the other replicas' runnables and the leader's have returned, so
// admission requests are still served while the controllers stop.
func TestWebhookServerStopsLast(t *testing.T) {
	var mu sync.Mutex
	var order []string
	record := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, what)
	}
	ready := make(chan struct{})
	server := &startAfter{Server: &fakeServer{started: make(chan struct{}), stopped: func() { record("webhook") }}, ready: ready}
	timeout := 10 * time.Second
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: server, GracefulShutdownTimeout: &timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = mgr.GetWebhookServer() // adds it, as Operator.WithWebhooks does by registering hooks
	slow := func(name string, leader bool) manager.Runnable {
		return leaderRunnable{need: leader, start: func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(100 * time.Millisecond) // a controller finishing its work
			record(name)
			return nil
		}}
	}
	for _, r := range []manager.Runnable{slow("rotator", false), slow("placement", true)} {
		if err := mgr.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	close(ready)
	select {
	case <-server.Server.(*fakeServer).started:
	case <-time.After(10 * time.Second):
		t.Fatal("webhook server not started")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("manager: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || order[2] != "webhook" || !slices.Contains(order, "rotator") || !slices.Contains(order, "placement") {
		t.Errorf("stop order %v, want the webhook server last", order)
	}
}

type leaderRunnable struct {
	need  bool
	start func(context.Context) error
}

func (r leaderRunnable) Start(ctx context.Context) error { return r.start(ctx) }
func (r leaderRunnable) NeedLeaderElection() bool        { return r.need }
