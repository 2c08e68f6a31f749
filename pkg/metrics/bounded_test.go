package metrics

import (
	"fmt"
	"strings"
	"testing"
)

func TestBoundedCapsDistinctValues(t *testing.T) {
	b := NewBounded(3)
	for i := range 3 {
		if got := b.Value(fmt.Sprint("g", i)); got != fmt.Sprint("g", i) {
			t.Fatalf("value %d = %q, want kept", i, got)
		}
	}
	if got := b.Value("g3"); got != OtherValue {
		t.Fatalf("4th distinct value = %q, want %q", got, OtherValue)
	}
	if got := b.Value("g1"); got != "g1" {
		t.Fatalf("a value seen before = %q, want kept", got)
	}
	long := strings.Repeat("k", 1000)
	if got := NewBounded(1).Value(long); len(got) != maxValueLen {
		t.Fatalf("long value kept at %d bytes, want %d", len(got), maxValueLen)
	}
}

func TestCappedAdmitsUpToItsLimitAndForgets(t *testing.T) {
	c := NewCapped(2)
	if !c.Admit("a") || !c.Admit("b") {
		t.Fatal("the first two keys are not admitted")
	}
	if c.Admit("c") {
		t.Fatal("a third key is admitted past the cap of 2")
	}
	if !c.Admit("a") {
		t.Fatal("a key admitted before is refused")
	}
	if !c.Forget("a") || c.Forget("c") {
		t.Fatal("Forget reports the wrong keys as admitted")
	}
	if !c.Admit("c") || c.Len() != 2 {
		t.Fatalf("after forgetting a: c refused or %d keys, want 2", c.Len())
	}
}
