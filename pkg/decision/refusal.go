package decision

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// maxRefusalMessage bounds the policy's own words kept from a refusal: they
// go into a log line and an Event, and a policy may write a long message.
const maxRefusalMessage = 256

// Refusal is an admission policy's denial of a write to a pod: a
// ValidatingAdmissionPolicy, or a validating webhook such as Kyverno's or
// Gatekeeper's. Sent again, the same patch is refused again.
type Refusal struct {
	// By names what refused: "ValidatingAdmissionPolicy 'p' with binding
	// 'b'" or "admission webhook \"w\"".
	By string
	// Message is the policy's message, cut to maxRefusalMessage bytes.
	Message string
}

var (
	// The API server's words for a ValidatingAdmissionPolicy's denial
	// (its validating dispatcher), with and without the binding.
	vapDenial = regexp.MustCompile(`ValidatingAdmissionPolicy '[^']*'( with binding '[^']*')? denied request`)
	// The API server's words for a webhook's denial (ToStatusErr of its
	// webhook errors package).
	webhookDenial = regexp.MustCompile(`admission webhook "[^"]*" denied the request`)
)

// Refused reports whether err is an admission policy's refusal and, if so,
// who refused and why. Only the API server's own wording counts: an RBAC
// 403 or the pod's own validation (a 422 without a policy's name) are not a
// policy's refusal. The codes are those a denial comes with: 403 or 422 from a
// ValidatingAdmissionPolicy (by its reason), 400 or more from a webhook (400
// when it sets none, as Kyverno; 403, as Gatekeeper).
func Refused(err error) (Refusal, bool) {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		return Refusal{}, false
	}
	s := status.Status()
	if s.Code < http.StatusBadRequest || s.Code >= http.StatusInternalServerError {
		return Refusal{}, false
	}
	msg := s.Message
	loc := vapDenial.FindStringIndex(msg)
	if loc == nil {
		loc = webhookDenial.FindStringIndex(msg)
	}
	if loc == nil {
		return Refusal{}, false
	}
	by := msg[loc[0]:loc[1]]
	by = strings.TrimSuffix(strings.TrimSuffix(by, " denied request"), " denied the request")
	// Kyverno's message spans lines: one line for a log and an Event.
	rest := strings.Join(strings.Fields(strings.TrimPrefix(msg[loc[1]:], ":")), " ")
	return Refusal{By: by, Message: cut(rest, maxRefusalMessage)}, true
}

// cut shortens s to at most n bytes on a rune boundary, with "..." when cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - 3
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}
