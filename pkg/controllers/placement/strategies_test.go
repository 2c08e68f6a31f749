package placement

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestStrategyCacheIsBounded: strategies are user text; however many
// distinct ones arrive, the compiled cache keeps at most strategyCacheSize.
func TestStrategyCacheIsBounded(t *testing.T) {
	c := NewController(clocktesting.NewFakeClock(time.Unix(0, 0)), nil, events.NewFakeRecorder(1), nil, NewTally(), 0)
	for i := range strategyCacheSize + 500 {
		if p := c.parse(fmt.Sprintf("team=t%d,weight=1", i)); p.err != nil {
			t.Fatal(p.err)
		}
	}
	if n := c.strategies.Len(); n > strategyCacheSize {
		t.Fatalf("%d compiled strategies cached, want at most %d", n, strategyCacheSize)
	}
	if p := c.parse("team=t0,weight=1"); p.err != nil || p.strategy == nil {
		t.Fatalf("an evicted strategy compiles again: %+v", p)
	}
}
