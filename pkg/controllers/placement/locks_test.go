package placement

import (
	"testing"
	"time"
)

func TestKeyedMutex(t *testing.T) {
	var k keyedMutex
	unlock := k.lock("default/rs-a")
	same := make(chan struct{})
	go func() {
		defer k.lock("default/rs-a")()
		close(same)
	}()
	other := make(chan struct{})
	go func() {
		// "default/rs-b" hashes to another of the 256 mutexes.
		defer k.lock("default/rs-b")()
		close(other)
	}()
	select {
	case <-other:
	case <-time.After(5 * time.Second):
		t.Fatal("another revision waited for the held one")
	}
	select {
	case <-same:
		t.Fatal("the same revision was locked twice")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	select {
	case <-same:
	case <-time.After(5 * time.Second):
		t.Fatal("the revision stayed locked after its unlock")
	}
}
