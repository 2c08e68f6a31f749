package events

import (
	"strings"
	"testing"
	"time"
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
	fake := events.NewFakeRecorder(2)
	r := NewRecorder(fake)
	r.Eventf(&corev1.Pod{}, nil, corev1.EventTypeWarning, "GroupUnavailable", "Place", "group 2: %s", strings.Repeat("pool: pod: key not in; ", 100))
	r.Publish(Event{Regarding: &corev1.Pod{}, Type: corev1.EventTypeWarning, Reason: "GroupUnavailable", Action: "Place", Message: strings.Repeat("pool: pod: key not in; ", 100)})
	for range 2 {
		e := <-fake.Events
		if len(e) > maxNote+len("Warning GroupUnavailable ") || !strings.HasSuffix(e, "...") {
			t.Errorf("recorded %d bytes: %.80q...; want the note cut to %d bytes", len(e), e, maxNote)
		}
	}
}

func TestPublishDedupes(t *testing.T) {
	fake := events.NewFakeRecorder(10)
	r := NewRecorder(fake)
	warn := func(reason, msg string, timeout time.Duration, values ...string) bool {
		return r.Publish(Event{Regarding: &corev1.ObjectReference{Kind: "Deployment", Name: "web", UID: "u1"}, Type: corev1.EventTypeWarning,
			Reason: reason, Action: "Place", Message: msg, DedupeValues: values, DedupeTimeout: timeout})
	}
	steps := []struct {
		name     string
		reason   string
		msg      string
		timeout  time.Duration
		values   []string
		recorded bool
	}{
		{name: "first", reason: "InvalidStrategy", msg: "bad", values: []string{"u1", "bad"}, recorded: true},
		{name: "repeat", reason: "InvalidStrategy", msg: "bad", values: []string{"u1", "bad"}},
		{name: "other values", reason: "InvalidStrategy", msg: "worse", values: []string{"u1", "worse"}, recorded: true},
		{name: "other reason, same values", reason: "NoGroupAvailable", msg: "bad", values: []string{"u1", "bad"}, recorded: true},
		{name: "keyed by reason alone, first", reason: "ImageInspectionFailed", msg: "timeout", timeout: 50 * time.Millisecond, values: []string{"u1"}, recorded: true},
		{name: "keyed by reason alone, new message", reason: "ImageInspectionFailed", msg: "denied", values: []string{"u1"}},
		{name: "no dedupe values", reason: "InvalidStrategy", msg: "bad", recorded: true},
		{name: "no dedupe values, again", reason: "InvalidStrategy", msg: "bad", recorded: true},
	}
	for _, s := range steps {
		if got := warn(s.reason, s.msg, s.timeout, s.values...); got != s.recorded {
			t.Errorf("%s: Publish = %v, want %v", s.name, got, s.recorded)
		}
	}
	if got, want := len(fake.Events), 6; got != want {
		t.Errorf("recorded %d Events, want %d", got, want)
	}
	time.Sleep(100 * time.Millisecond)
	if !warn("ImageInspectionFailed", "timeout", 0, "u1") {
		t.Error("an Event past its DedupeTimeout was dropped")
	}
	if warn("InvalidStrategy", "bad", 0, "u1", "bad") {
		t.Error("an Event within its DedupeTimeout was recorded")
	}
}

func TestNilRecorderRecordsNothing(t *testing.T) {
	r := NewRecorder(nil)
	if r.Publish(Event{Reason: "InvalidStrategy", Message: "bad"}) {
		t.Error("a Recorder without an EventRecorder reported an Event recorded")
	}
	r.Eventf(&corev1.Pod{}, nil, corev1.EventTypeWarning, "InvalidStrategy", "Admit", "bad")
}
