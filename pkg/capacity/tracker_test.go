package capacity

import (
	"fmt"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var start = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

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
	clk := clocktesting.NewFakeClock(start)
	tr := NewTracker(clk, 3*time.Minute, 30*time.Minute)
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
	clk := clocktesting.NewFakeClock(start)
	tr := NewTracker(clk, 3*time.Minute, 30*time.Minute)
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
	clk := clocktesting.NewFakeClock(start)
	tr := NewTracker(clk, 3*time.Minute, 30*time.Minute)
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
	clk := clocktesting.NewFakeClock(start)
	tr := NewTracker(clk, 3*time.Minute, 30*time.Minute)
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
