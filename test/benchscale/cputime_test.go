package main

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and a parenthesis, utime 250 and stime 50
	// ticks.
	line := "4242 (kube (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000 10 18446744073709551615"
	got, ok := parseStat(line)
	if !ok || got != 3 {
		t.Fatalf("parseStat = %v, %v; want 3 s", got, ok)
	}
	if _, ok := parseStat("4242 (short) S 1"); ok {
		t.Fatal("a truncated line parsed")
	}
	// This process has used some CPU, and reads it back.
	if times := cpuTimes(map[string]int{"self": os.Getpid()}); len(times) != 1 {
		t.Fatalf("cpuTimes of this process: %v", times)
	}
	if d := cpuSince(map[string]float64{"a": 1, "b": 2}, map[string]float64{"a": 3.5, "c": 1}); len(d) != 1 || d["a"] != 2.5 {
		t.Fatalf("cpuSince = %v", d)
	}
}
