package decision_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/test"
)

func TestRefused(t *testing.T) {
	kyverno := "\n\nresource Pod/web/nginx-1 was blocked due to the following policies\n\nno-affinity-changes:\n  check: affinity is immutable\n"
	for name, tc := range map[string]struct {
		err       error
		by, msg   string
		isRefusal bool
	}{
		"ValidatingAdmissionPolicy": {
			err: test.PolicyDenial("nginx-1", "no-affinity-changes", "no-affinity-changes-web", "spec.affinity is immutable"),
			by:  "ValidatingAdmissionPolicy 'no-affinity-changes' with binding 'no-affinity-changes-web'", msg: "spec.affinity is immutable", isRefusal: true,
		},
		"ValidatingAdmissionPolicy with reason Forbidden, wrapped": {
			err: fmt.Errorf("writing the decision: %w", apierrors.NewForbidden(corev1.Resource("pods"), "nginx-1",
				fmt.Errorf("ValidatingAdmissionPolicy 'p' denied request: no"))),
			by: "ValidatingAdmissionPolicy 'p'", msg: "no", isRefusal: true,
		},
		"Kyverno": {
			err: test.WebhookDenial("validate.kyverno.svc-fail", 0, kyverno),
			by:  `admission webhook "validate.kyverno.svc-fail"`, msg: "resource Pod/web/nginx-1 was blocked due to the following policies no-affinity-changes: check: affinity is immutable", isRefusal: true,
		},
		"Gatekeeper": {
			err: test.WebhookDenial("validation.gatekeeper.sh", http.StatusForbidden, "[pod-affinity-immutable] affinity is immutable"),
			by:  `admission webhook "validation.gatekeeper.sh"`, msg: "[pod-affinity-immutable] affinity is immutable", isRefusal: true,
		},
		"RBAC": {
			err: apierrors.NewForbidden(corev1.Resource("pods"), "nginx-1", fmt.Errorf(`User "system:serviceaccount:apportion:apportion" cannot patch resource "pods"`)),
		},
		"the pod's own validation": {
			err: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "nginx-1", nil),
		},
		"a webhook that failed to answer": {
			err: apierrors.NewInternalError(fmt.Errorf(`failed calling webhook "validate.kyverno.svc-fail": admission webhook "validate.kyverno.svc-fail" denied the request`)),
		},
		"not an API error": {err: fmt.Errorf(`admission webhook "w" denied the request: no`)},
		"nil":              {},
	} {
		t.Run(name, func(t *testing.T) {
			r, ok := decision.Refused(tc.err)
			if ok != tc.isRefusal || r.By != tc.by || r.Message != tc.msg {
				t.Errorf("Refused = %+v, %v; want {By:%s Message:%s}, %v", r, ok, tc.by, tc.msg, tc.isRefusal)
			}
		})
	}
}

// TestRefusedMessageIsCut: a policy's long message is cut, on a rune
// boundary, before it reaches a log line or an Event.
func TestRefusedMessageIsCut(t *testing.T) {
	r, ok := decision.Refused(test.WebhookDenial("w", 0, strings.Repeat("é", 500)))
	if !ok || len(r.Message) > 256 || !strings.HasSuffix(r.Message, "...") || !strings.HasPrefix(r.Message, "éé") {
		t.Errorf("Refused = %q (%d bytes), %v; want the message cut to 256 bytes", r.Message, len(r.Message), ok)
	}
	if !utf8.ValidString(r.Message) || !strings.HasSuffix(strings.TrimSuffix(r.Message, "..."), "é") {
		t.Errorf("message %q cut inside a rune", r.Message)
	}
}
