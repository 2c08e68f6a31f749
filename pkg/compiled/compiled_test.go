package compiled

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

const (
	odSpot = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	bad    = "karpenter.sh/capacity-type=on-demand,weight=x"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		raw     string
		keys    []string
		wantErr bool
	}{
		{"two groups", odSpot, []string{"karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"}, false},
		{"one group", "team=a,weight=1", []string{"team=a"}, false},
		{"bad weight", bad, nil, true},
		{"empty", "", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(tc.raw)
			if tc.wantErr {
				var se *strategy.Error
				if !errors.As(err, &se) || c != nil {
					t.Fatalf("Parse(%q) = %+v, %v; want a *strategy.Error", tc.raw, c, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Method.Len() != len(tc.keys) || len(c.Index) != len(tc.keys) {
				t.Fatalf("%d groups in the method, %d in the index, want %d", c.Method.Len(), len(c.Index), len(tc.keys))
			}
			for i, k := range tc.keys {
				if c.Index[k] != i {
					t.Errorf("index of %q = %d, want %d", k, c.Index[k], i)
				}
			}
			if c.Hash != decision.StrategyHash(c.Strategy) {
				t.Errorf("hash %q, want decision.StrategyHash %q", c.Hash, decision.StrategyHash(c.Strategy))
			}
		})
	}
}

// TestBoundsAgree: the parser and the engine bound strategies alike, so a
// strategy that parses always compiles (one at the weight bound does, one
// past it is the parser's error).
func TestBoundsAgree(t *testing.T) {
	if strategy.MaxGroups != apportion.MaxGroups || strategy.MaxWeightSum != apportion.MaxWeightSum {
		t.Fatalf("strategy bounds %d groups, weights %d; apportion %d, %d",
			strategy.MaxGroups, strategy.MaxWeightSum, apportion.MaxGroups, apportion.MaxWeightSum)
	}
	at := fmt.Sprintf("a=b,weight=%d:c=d,weight=%d", strategy.MaxWeightSum/2-1, strategy.MaxWeightSum/2+1)
	if _, err := Parse(at); err != nil {
		t.Errorf("Parse(%q): %v", at, err)
	}
	past := fmt.Sprintf("a=b,weight=%d:c=d,weight=%d", strategy.MaxWeightSum/2, strategy.MaxWeightSum/2+1)
	var se *strategy.Error
	if _, err := Parse(past); !errors.As(err, &se) {
		t.Errorf("Parse(%q) = %v, want a *strategy.Error", past, err)
	}
}

// TestParseMethod: the method carries each group's base and weight.
func TestParseMethod(t *testing.T) {
	c, err := Parse(odSpot)
	if err != nil {
		t.Fatal(err)
	}
	// Base 2 on-demand first, then 1 on-demand : 3 spot.
	for n, want := range map[int64][]int64{2: {2, 0}, 6: {3, 3}, 10: {4, 6}} {
		if got := c.Method.CountsAt(n, apportion.All); !slices.Equal(got, want) {
			t.Errorf("%d pods: %v, want %v", n, got, want)
		}
	}
}

// TestCache: a hit returns what the miss compiled (the same pointer), an
// error is remembered like a result, and the capacity bounds the texts kept.
func TestCache(t *testing.T) {
	for _, tc := range []struct {
		name string
		size uint64
		gets []string // in order; the last is checked against its first result
		same bool     // whether the last Get returns the first Get's result
		len  int
	}{
		{"hit", 4, []string{odSpot, odSpot}, true, 1},
		{"miss of another text", 4, []string{odSpot, "team=a,weight=1", odSpot}, true, 2},
		{"error cached", 4, []string{bad, bad}, true, 1},
		{"capacity bound evicts the least recently used", 2, []string{odSpot, "team=a,weight=1", "team=b,weight=1", odSpot}, false, 2},
		{"a hit keeps a text", 2, []string{odSpot, "team=a,weight=1", odSpot, "team=b,weight=1", odSpot}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache(tc.size)
			last := tc.gets[len(tc.gets)-1]
			var firstS, lastS *Strategy
			var firstErr, lastErr error
			seen := false
			for _, raw := range tc.gets {
				s, err := c.Get(raw)
				if raw == last && !seen {
					firstS, firstErr, seen = s, err, true
				}
				lastS, lastErr = s, err
			}
			if (firstErr != nil) != (lastErr != nil) || (firstErr != nil) != (last == bad) {
				t.Fatalf("errors %v then %v", firstErr, lastErr)
			}
			same := firstS == lastS && firstErr == lastErr //nolint:errorlint // identity: the cache returns the very same error value
			if firstErr == nil && firstS == nil {
				t.Fatal("no strategy and no error")
			}
			if same != tc.same {
				t.Errorf("same result on the last Get = %v, want %v", same, tc.same)
			}
			if c.Len() != tc.len {
				t.Errorf("%d texts cached, want %d", c.Len(), tc.len)
			}
		})
	}
}

// TestCacheIsBounded: strategies are user text; however many distinct ones
// arrive, the cache keeps at most its size, and an evicted text compiles
// again.
func TestCacheIsBounded(t *testing.T) {
	c := NewCache(DefaultSize)
	for i := range DefaultSize + 500 {
		if _, err := c.Get(fmt.Sprintf("team=t%d,weight=1", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Len(); n > DefaultSize {
		t.Fatalf("%d compiled strategies cached, want at most %d", n, DefaultSize)
	}
	if s, err := c.Get("team=t0,weight=1"); err != nil || s.Strategy == nil {
		t.Fatalf("an evicted strategy compiles again: %+v, %v", s, err)
	}
}
