package operator

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
)

func TestTruncateNote(t *testing.T) {
	short := "NodePool spot cannot get capacity"
	if got := truncateNote(short); got != short {
		t.Errorf("a short note changed: %q", got)
	}
	for _, long := range []string{strings.Repeat("x", 5000), strings.Repeat("é", 700), strings.Repeat("ab€", 400)} {
		got := truncateNote(long)
		if len(got) > maxNote || !strings.HasSuffix(got, "...") || !utf8.ValidString(got) || !strings.HasPrefix(long, strings.TrimSuffix(got, "...")) {
			t.Errorf("note of %d bytes cut to %d bytes (valid UTF-8 %v): want at most %d, a prefix ending in ...", len(long), len(got), utf8.ValidString(got), maxNote)
		}
	}
}

func TestTruncatingRecorder(t *testing.T) {
	fake := events.NewFakeRecorder(1)
	r := truncatingRecorder{fake}
	r.Eventf(&corev1.Pod{}, nil, corev1.EventTypeWarning, "GroupUnavailable", "Place", "group 2: %s", strings.Repeat("pool: pod: key not in; ", 100))
	e := <-fake.Events
	if len(e) > maxNote+len("Warning GroupUnavailable ") || !strings.HasSuffix(e, "...") {
		t.Errorf("recorded %d bytes: %.80q...; want the note cut to %d bytes", len(e), e, maxNote)
	}
}
