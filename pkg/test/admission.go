package test

import (
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyDenial is the error the API server returns when
// ValidatingAdmissionPolicy policy, bound by binding, denies a write to pod
// name with msg and no reason of its own: a 422 Invalid, worded as the API
// server's validating policy dispatcher words it.
func PolicyDenial(name, policy, binding, msg string) error {
	message := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", policy, binding, msg)
	err := apierrors.NewForbidden(corev1.Resource("pods"), name, errors.New(message))
	err.ErrStatus.Reason = metav1.StatusReasonInvalid
	err.ErrStatus.Code = http.StatusUnprocessableEntity
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Message: message})
	return err
}

// WebhookDenial is the error the API server returns when validating webhook
// webhook denies a write with code (0: the webhook set none, as Kyverno;
// Gatekeeper sets 403) and msg, worded as the API server words it.
func WebhookDenial(webhook string, code int32, msg string) error {
	if code < http.StatusBadRequest {
		code = http.StatusBadRequest
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code,
		Message: fmt.Sprintf("admission webhook %q denied the request: %s", webhook, msg)}}
}
