// Package events records apportion's Kubernetes Events: Recorder (built by
// NewRecorder) wraps client-go's events.EventRecorder, cuts every note to the
// API server's limit, and Publish drops an Event that repeats one published
// within its dedupe window (Event.DedupeValues, DedupeTimeout, else
// DefaultDedupeTimeout), remembered in a bounded cache, so that a burst of
// pods of one workload gives one Warning, not one per pod.
package events

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jellydator/ttlcache/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// maxNote is the API server's limit on an Event's note, in bytes.
const maxNote = 1024

// DefaultDedupeTimeout is the dedupe window of an Event with DedupeValues
// and no DedupeTimeout.
const DefaultDedupeTimeout = 10 * time.Minute

// dedupeCapacity bounds the remembered Events: the keys carry user text (a
// workload's UID, its annotations' problems), so a tenant writing many
// distinct ones only evicts the oldest.
const dedupeCapacity = 4096

// Event is one Event to publish.
type Event struct {
	// Regarding is the object the Event is about.
	Regarding runtime.Object
	// Type is corev1.EventTypeNormal or corev1.EventTypeWarning.
	Type    string
	Reason  string
	Action  string
	Message string
	// DedupeValues, when set, make the Event a duplicate of any earlier one
	// with the same Reason and values published within DedupeTimeout
	// (DefaultDedupeTimeout when zero). Callers name the object in them
	// (usually its UID): Regarding is not part of the key.
	DedupeValues  []string
	DedupeTimeout time.Duration
}

func (e Event) dedupeKey() string {
	return e.Reason + "/" + strings.Join(e.DedupeValues, "/")
}

// Recorder publishes Events through a client-go EventRecorder. It is an
// events.EventRecorder itself (Eventf records every call, only truncated),
// so the components that take one can be given a Recorder. A nil
// EventRecorder records nothing.
type Recorder struct {
	rec    events.EventRecorder
	recent *ttlcache.Cache[string, struct{}]
}

var _ events.EventRecorder = &Recorder{}

// NewRecorder wraps rec.
func NewRecorder(rec events.EventRecorder) *Recorder {
	return &Recorder{rec: rec, recent: ttlcache.New(
		ttlcache.WithCapacity[string, struct{}](dedupeCapacity),
		// A repeat must not extend the window: one Event per window, not
		// one after the repeats stop.
		ttlcache.WithDisableTouchOnHit[string, struct{}](),
	)}
}

// Publish records e unless it is a duplicate (see Event.DedupeValues). It
// reports whether e was recorded, for callers that log what they publish.
func (r *Recorder) Publish(e Event) bool {
	if r.rec == nil {
		return false
	}
	if len(e.DedupeValues) > 0 {
		timeout := e.DedupeTimeout
		if timeout <= 0 {
			timeout = DefaultDedupeTimeout
		}
		if _, seen := r.recent.GetOrSet(e.dedupeKey(), struct{}{}, ttlcache.WithTTL[string, struct{}](timeout)); seen {
			return false
		}
	}
	r.rec.Eventf(e.Regarding, nil, e.Type, e.Reason, e.Action, "%s", truncateNote(e.Message))
	return true
}

// Eventf implements events.EventRecorder: it records every call, with the
// note cut to the API server's limit. The API server rejects an Event with a
// longer note outright, and the user would see nothing (a GroupUnavailable
// Event that lists why each of many NodePools cannot serve a group gets that
// long).
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if r.rec == nil {
		return
	}
	r.rec.Eventf(regarding, related, eventtype, reason, action, "%s", truncateNote(fmt.Sprintf(note, args...)))
}

// truncateNote cuts s to at most maxNote bytes, on a rune boundary, ending
// in "..." when cut.
func truncateNote(s string) string {
	if len(s) <= maxNote {
		return s
	}
	cut := maxNote - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
