package capacity

import (
	"fmt"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var start = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

// newTracker is a tracker with a 3m first outage and a 30m cap, on a fake
// clock at start.
func newTracker() (*clocktesting.FakeClock, *Tracker) {
	clk := clocktesting.NewFakeClock(start)
	return clk, NewTracker(clk, 3*time.Minute, 30*time.Minute)
}

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		key        Key
		want, kind string
		name       string
	}{
		{PoolKey("spot"), "nodepool/spot", KindNodePool, "spot"},
		{LabelsKey("karpenter.sh/capacity-type=spot,kubernetes.io/arch=arm64"), "labels/karpenter.sh/capacity-type=spot,kubernetes.io/arch=arm64", KindLabels,
			"karpenter.sh/capacity-type=spot,kubernetes.io/arch=arm64"},
		{Key("other"), "other", "", "other"},
	} {
		if string(tc.key) != tc.want || tc.key.Kind() != tc.kind || tc.key.Name() != tc.name {
			t.Errorf("%q: kind %q name %q; want %q, %q, %q", tc.key, tc.key.Kind(), tc.key.Name(), tc.want, tc.kind, tc.name)
		}
	}
}

func TestExpiry(t *testing.T) {
	clk, tr := newTracker()
	k := PoolKey("spot")
	if out, _, until := tr.Unavailable(k); out || !until.IsZero() {
		t.Fatalf("never marked: out %v until %v", out, until)
	}
	until, newly := tr.Mark(k, "timeout")
	if !newly || !until.Equal(start.Add(3*time.Minute)) {
		t.Fatalf("first mark: until %v newly %v", until, newly)
	}
	if out, reason, u := tr.Unavailable(k); !out || reason != "timeout" || !u.Equal(until) {
		t.Fatalf("after mark: %v %q %v", out, reason, u)
	}
	if out, _, _ := tr.Unavailable(PoolKey("on-demand")); out {
		t.Fatal("another key is out")
	}
	clk.Step(3*time.Minute - time.Nanosecond)
	if out, _, _ := tr.Unavailable(k); !out {
		t.Fatal("back before its TTL")
	}
	if snap := tr.Snapshot(); len(snap) != 1 || !snap[k].Equal(until) {
		t.Fatalf("snapshot %v", snap)
	}
	clk.Step(time.Nanosecond)
	out, reason, u := tr.Unavailable(k)
	if out || reason != "" || !u.Equal(until) {
		t.Fatalf("after the TTL: out %v reason %q until %v; want available, the last outage's end", out, reason, u)
	}
	if snap := tr.Snapshot(); len(snap) != 0 {
		t.Fatalf("snapshot after expiry %v", snap)
	}
}

func TestNoExtensionWhileOut(t *testing.T) {
	clk, tr := newTracker()
	k := LabelsKey("a=b")
	first, _ := tr.Mark(k, "not_ready")
	clk.Step(2 * time.Minute)
	until, newly := tr.Mark(k, "timeout")
	if newly || !until.Equal(first) {
		t.Fatalf("mark while out: until %v newly %v; want %v, false", until, newly, first)
	}
	if _, reason, _ := tr.Unavailable(k); reason != "not_ready" {
		t.Errorf("reason %q, want the first one", reason)
	}
	clk.Step(time.Minute)
	if out, _, _ := tr.Unavailable(k); out {
		t.Error("extended by a second mark")
	}
}

// TestBackoff: every mark shortly after the key came back doubles the TTL,
// up to maxTTL; after maxTTL available, the TTL starts again from ttl.
func TestBackoff(t *testing.T) {
	clk, tr := newTracker()
	k := PoolKey("spot")
	for i, want := range []time.Duration{3, 6, 12, 24, 30, 30} {
		until, newly := tr.Mark(k, "launch_failed")
		if !newly || until.Sub(clk.Now()) != want*time.Minute {
			t.Fatalf("strike %d: out for %s newly %v; want %s", i, until.Sub(clk.Now()), newly, want*time.Minute)
		}
		clk.SetTime(until.Add(time.Minute)) // back for a minute, then marked again
	}
	// Available for just under maxTTL: still a strike.
	clk.Step(30*time.Minute - time.Minute - time.Nanosecond)
	if until, _ := tr.Mark(k, "timeout"); until.Sub(clk.Now()) != 30*time.Minute {
		t.Fatalf("just under maxTTL available: out for %s, want 30m", until.Sub(clk.Now()))
	}
	// Available for maxTTL: strikes reset.
	_, _, end := tr.Unavailable(k)
	clk.SetTime(end.Add(30 * time.Minute))
	if until, newly := tr.Mark(k, "timeout"); !newly || until.Sub(clk.Now()) != 3*time.Minute {
		t.Fatalf("after maxTTL available: out for %s, want 3m", until.Sub(clk.Now()))
	}
}

func TestSmallMaxTTL(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	tr := NewTracker(clk, 3*time.Minute, time.Minute)
	if until, _ := tr.Mark(PoolKey("a"), "timeout"); until.Sub(start) != 3*time.Minute {
		t.Fatalf("maxTTL below ttl: out for %s, want ttl", until.Sub(start))
	}
}

func TestSnapshotForgetsOldKeys(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	tr := NewTracker(clk, time.Minute, 10*time.Minute)
	tr.Mark(PoolKey("a"), "timeout")
	clk.Step(11 * time.Minute)
	tr.Snapshot()
	tr.mu.RLock()
	n := len(tr.keys)
	tr.mu.RUnlock()
	if n != 0 {
		t.Fatalf("%d keys kept after maxTTL available", n)
	}
	if out, _, until := tr.Unavailable(PoolKey("a")); out || !until.IsZero() {
		t.Fatalf("forgotten key: %v %v", out, until)
	}
}

// TestConcurrent: concurrent marks of one key report one new outage, and
// readers see a consistent state (run with -race).
func TestConcurrent(t *testing.T) {
	_, tr := newTracker()
	var wg sync.WaitGroup
	var mu sync.Mutex
	newlies := map[Key]int{}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				k := PoolKey(fmt.Sprint(i % 10))
				if _, newly := tr.Mark(k, "timeout"); newly {
					mu.Lock()
					newlies[k]++
					mu.Unlock()
				}
				if out, _, _ := tr.Unavailable(k); !out {
					t.Errorf("%s available right after its mark", k)
				}
				_ = tr.Snapshot()
			}
		}()
	}
	wg.Wait()
	if len(newlies) != 10 {
		t.Fatalf("%d keys newly marked, want 10", len(newlies))
	}
	for k, n := range newlies {
		if n != 1 {
			t.Errorf("%s newly marked %d times, want once", k, n)
		}
	}
}

func TestUnavailableDoesNotAllocate(t *testing.T) {
	tr := NewTracker(clocktesting.NewFakeClock(start), time.Minute, time.Hour)
	k := PoolKey("spot")
	tr.Mark(k, "timeout")
	other := PoolKey("other")
	if n := testing.AllocsPerRun(100, func() {
		tr.Unavailable(k)
		tr.Unavailable(other)
	}); n != 0 {
		t.Fatalf("Unavailable allocates %v times", n)
	}
}

func BenchmarkUnavailable(b *testing.B) {
	tr := NewTracker(clocktesting.NewFakeClock(start), time.Minute, time.Hour)
	k := PoolKey("spot")
	tr.Mark(k, "timeout")
	b.ReportAllocs()
	for b.Loop() {
		tr.Unavailable(k)
	}
}

func TestScopedKeys(t *testing.T) {
	group := "karpenter.sh/capacity-type=spot,kubernetes.io/arch=arm64"
	for _, tc := range []struct {
		key                     Key
		want, scope, kind, name string
		base                    Key
	}{
		{PoolKey("spot"), "nodepool/spot", "", KindNodePool, "spot", PoolKey("spot")},
		{Scoped("deploy-uid", PoolKey("spot")), "workload/deploy-uid/nodepool/spot", "deploy-uid", KindNodePool, "spot", PoolKey("spot")},
		{Scoped("deploy-uid", LabelsKey(group)), "workload/deploy-uid/labels/" + group, "deploy-uid", KindLabels, group, LabelsKey(group)},
		// Scoping a scoped key scopes its base.
		{Scoped("b", Scoped("a", PoolKey("spot"))), "workload/b/nodepool/spot", "b", KindNodePool, "spot", PoolKey("spot")},
		// No scope, or one that is not a UID: the key itself.
		{Scoped("", PoolKey("spot")), "nodepool/spot", "", KindNodePool, "spot", PoolKey("spot")},
		{Scoped("a/b", PoolKey("spot")), "nodepool/spot", "", KindNodePool, "spot", PoolKey("spot")},
		{Scoped("u", Key("other")), "workload/u/other", "u", "", "other", Key("other")},
	} {
		if string(tc.key) != tc.want || tc.key.Scope() != tc.scope || tc.key.Kind() != tc.kind || tc.key.Name() != tc.name || tc.key.Base() != tc.base {
			t.Errorf("%q: scope %q kind %q name %q base %q; want %q, %q, %q, %q, %q",
				tc.key, tc.key.Scope(), tc.key.Kind(), tc.key.Name(), tc.key.Base(), tc.want, tc.scope, tc.kind, tc.name, tc.base)
		}
	}
}

// TestScopedOutages: a workload's outage and the cluster-wide one are
// separate keys.
func TestScopedOutages(t *testing.T) {
	_, tr := newTracker()
	spot := PoolKey("spot")
	mine, theirs := Scoped("mine", spot), Scoped("theirs", spot)
	tr.Mark(mine, "no_nodeclaim")
	if out, _, _ := tr.Unavailable(spot); out {
		t.Fatal("a workload's outage made the pool out for everyone")
	}
	if out, _, _ := tr.Unavailable(theirs); out {
		t.Fatal("a workload's outage reached another workload")
	}
	if out, reason, _ := tr.Unavailable(mine); !out || reason != "no_nodeclaim" {
		t.Fatalf("the workload's key: out %v reason %q", out, reason)
	}
	tr.Mark(spot, "limits")
	if out, reason, _ := tr.Unavailable(mine); !out || reason != "no_nodeclaim" {
		t.Fatalf("the workload's key after a cluster-wide mark: out %v reason %q", out, reason)
	}
	if snap := tr.Snapshot(); len(snap) != 2 {
		t.Fatalf("snapshot %v, want the pool and the workload's key", snap)
	}
}

func TestExtend(t *testing.T) {
	clk, tr := newTracker()
	k := PoolKey("spot")
	if until := tr.Extend(k, "limits"); !until.IsZero() {
		t.Fatalf("extending a key never out: %v", until)
	}
	if out, _, _ := tr.Unavailable(k); out {
		t.Fatal("extending a key never out made it out")
	}
	first, _ := tr.Mark(k, "limits")
	clk.SetTime(first.Add(-2 * time.Second))
	until := tr.Extend(k, "limits")
	if want := clk.Now().Add(3 * time.Minute); !until.Equal(want) {
		t.Fatalf("extended until %v, want %v (another outage of the same length)", until, want)
	}
	clk.SetTime(first.Add(time.Second))
	if out, reason, u := tr.Unavailable(k); !out || reason != "limits" || !u.Equal(until) {
		t.Fatalf("past the first end: out %v reason %q until %v; want out until %v", out, reason, u, until)
	}
	// It ends at the extended end; extending then changes nothing.
	clk.SetTime(until)
	if u := tr.Extend(k, "limits"); !u.IsZero() {
		t.Fatalf("extending an ended outage: %v", u)
	}
	if out, _, u := tr.Unavailable(k); out || !u.Equal(until) {
		t.Fatalf("after the extended end: out %v until %v", out, u)
	}
	// A strike's outage is extended by its own (doubled) length.
	second, _ := tr.Mark(k, "limits")
	if second.Sub(clk.Now()) != 6*time.Minute {
		t.Fatalf("second outage lasts %s, want 6m", second.Sub(clk.Now()))
	}
	clk.Step(time.Minute)
	if u := tr.Extend(k, "not_ready"); u.Sub(clk.Now()) != 6*time.Minute {
		t.Fatalf("strike extended by %s, want 6m", u.Sub(clk.Now()))
	}
	if _, reason, _ := tr.Unavailable(k); reason != "not_ready" {
		t.Errorf("reason %q after Extend, want the new one", reason)
	}
}

func TestLift(t *testing.T) {
	clk, tr := newTracker()
	k := PoolKey("spot")
	if tr.Lift(k) {
		t.Fatal("lifted a key never out")
	}
	tr.Mark(k, "limits")
	clk.Step(time.Minute)
	if !tr.Lift(k) {
		t.Fatal("Lift of a key out reported false")
	}
	out, reason, until := tr.Unavailable(k)
	if out || reason != "" || !until.Equal(clk.Now()) {
		t.Fatalf("after Lift: out %v reason %q until %v; want available since now", out, reason, until)
	}
	if tr.Lift(k) {
		t.Error("lifted twice")
	}
	if snap := tr.Snapshot(); len(snap) != 0 {
		t.Errorf("snapshot after Lift %v", snap)
	}
	// Marked again soon after: a strike.
	clk.Step(time.Minute)
	if until, newly := tr.Mark(k, "limits"); !newly || until.Sub(clk.Now()) != 6*time.Minute {
		t.Fatalf("mark after Lift: out for %s newly %v; want 6m", until.Sub(clk.Now()), newly)
	}
	// Lifting one workload's key leaves the cluster-wide one.
	s := Scoped("u", PoolKey("od"))
	tr.Mark(s, "timeout")
	tr.Mark(PoolKey("od"), "not_ready")
	tr.Lift(s)
	if out, _, _ := tr.Unavailable(PoolKey("od")); !out {
		t.Error("lifting a workload's key lifted the pool's")
	}
}

// TestScopedOut lists the workloads' keys of one NodePool that are out now,
// with their reasons: not the pool's own key, not another pool's, not a
// key whose outage ended.
func TestScopedOut(t *testing.T) {
	clk, tr := newTracker()
	spot := PoolKey("spot")
	tr.Mark(spot, "limits")
	tr.Mark(Scoped("w1", spot), "limits")
	tr.Mark(Scoped("w2", spot), "no_offering")
	tr.Mark(Scoped("w1", PoolKey("spot-2")), "timeout")
	tr.Mark(Scoped("w3", spot), "timeout")
	tr.Lift(Scoped("w3", spot))
	got := tr.ScopedOut(spot)
	want := map[Key]string{Scoped("w1", spot): "limits", Scoped("w2", spot): "no_offering"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ScopedOut %v, want %v", got, want)
	}
	clk.Step(3 * time.Minute)
	if got := tr.ScopedOut(spot); len(got) != 0 {
		t.Fatalf("after the TTL: %v, want none", got)
	}
}
