// Package lease keeps the placement Lease as its informer's events leave
// it. The webhook reads it at every admission, the placement controller
// twice per decision and the gate janitor once per gated pod: a read from
// the cache deep-copies the Lease each time, a read from here is an atomic
// load.
package lease

import (
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Spec is what apportion reads of the Lease's spec. A time the Lease does
// not set is zero (the API server never stores a zero time: it is sent as
// null).
type Spec struct {
	// Holder is the holder identity, "" when the Lease names none.
	Holder string
	// AcquireTime is when the holder acquired the Lease.
	AcquireTime time.Time
	// RenewTime is when the holder last renewed (or released) the Lease.
	RenewTime time.Time
	// Duration is the lease duration; HasDuration is false when the Lease
	// does not set one.
	Duration    time.Duration
	HasDuration bool
}

// Watch keeps the Spec of one Lease, fed by the Lease informer's events.
// Its handler runs just after the informer's store is updated, so the Spec
// is the cached Lease's. Register it on the informer once; every reader
// shares it.
type Watch struct {
	key client.ObjectKey
	// synced is the handler registration's HasSynced: true once the
	// informer's first listing went through the handler.
	synced atomic.Pointer[func() bool]
	// spec is the Lease's, nil while the Lease is not cached. A stored
	// Spec is never changed: each event stores a new one.
	spec atomic.Pointer[Spec]
}

// NewWatch follows the Lease named key; any other Lease's events are
// ignored.
func NewWatch(key client.ObjectKey) *Watch {
	return &Watch{key: key}
}

// Spec is the cached Lease's spec, and false when the Lease is not cached
// (or w is nil: nothing follows it).
func (w *Watch) Spec() (Spec, bool) {
	if w == nil {
		return Spec{}, false
	}
	if p := w.spec.Load(); p != nil {
		return *p, true
	}
	return Spec{}, false
}

// WithSynced gives the Watch its handler registration's HasSynced, for
// Synced.
func (w *Watch) WithSynced(hasSynced func() bool) {
	w.synced.Store(&hasSynced)
}

// Synced reports whether the informer's first listing went through the
// Watch: until then a missing Lease may only be one not listed yet, so the
// replica is not ready (an admission would take it for no leader and leave
// the pod ungated).
func (w *Watch) Synced() bool {
	if w == nil {
		return true
	}
	f := w.synced.Load()
	return f != nil && (*f)()
}

// Ready is a readiness check (a controller-runtime healthz.Checker) that
// passes once the Watch is Synced.
func (w *Watch) Ready(*http.Request) error {
	if !w.Synced() {
		return errors.New("the placement Lease is not listed yet")
	}
	return nil
}

// OnAdd is the Lease's creation, or its first listing.
func (w *Watch) OnAdd(obj any, _ bool) { w.set(obj) }

// OnUpdate is an acquisition, a renewal or a release.
func (w *Watch) OnUpdate(_, obj any) { w.set(obj) }

// OnDelete forgets the Lease: a deleted Lease names nobody.
func (w *Watch) OnDelete(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok && w.follows(l) {
		w.spec.Store(nil)
	}
}

func (w *Watch) set(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || !w.follows(l) {
		return
	}
	s := &Spec{}
	if h := l.Spec.HolderIdentity; h != nil {
		s.Holder = *h
	}
	if t := l.Spec.AcquireTime; t != nil {
		s.AcquireTime = t.Time
	}
	if t := l.Spec.RenewTime; t != nil {
		s.RenewTime = t.Time
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil {
		s.Duration, s.HasDuration = time.Duration(*d)*time.Second, true
	}
	w.spec.Store(s)
}

// follows tells the Lease named by key from any other: a Lease of the
// same name in a tenant's namespace says nothing about who leads.
func (w *Watch) follows(l *coordinationv1.Lease) bool {
	return l.Namespace == w.key.Namespace && l.Name == w.key.Name
}
