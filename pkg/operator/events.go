package operator

import (
	"fmt"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// maxNote is the API server's limit on an Event's note, in bytes.
const maxNote = 1024

// truncatingRecorder cuts Event notes to maxNote: the API server rejects an
// Event with a longer note outright, and the user would see nothing (a
// GroupUnavailable Event that lists why each of many NodePools cannot serve
// a group gets that long).
type truncatingRecorder struct{ events.EventRecorder }

func (r truncatingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", truncateNote(fmt.Sprintf(note, args...)))
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
