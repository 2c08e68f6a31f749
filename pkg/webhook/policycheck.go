package webhook

import (
	"context"
	"encoding/json"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// policyCheck is what a policy validator adds to the steps every policy
// validator takes: decode, validate, then label what the policy covers.
type policyCheck[T any] struct {
	// kind names the policy in log lines ("placement policy").
	kind string
	// keys are the policy's key/value pairs in log lines.
	keys []any
	// validate returns why the policy is denied; nil admits it.
	validate func(*T) error
	// mark labels the namespaces of the pods the policy places; unmarked
	// is the log line when it fails.
	mark     func(context.Context, *T) error
	unmarked string
}

// handle decodes the policy, denies it when validate says so, and labels
// its namespaces before admitting it (not for a dry run). Like every
// validator it fails open: a request it cannot decode, or whose namespaces
// it cannot label, is admitted.
func (c policyCheck[T]) handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var p T
	if err := json.Unmarshal(req.Object.Raw, &p); err != nil {
		log.FromContext(ctx).Error(err, "decoding "+c.kind+", admitting it", c.keys...)
		return admission.Allowed("")
	}
	if err := c.validate(&p); err != nil {
		return admission.Denied(err.Error())
	}
	if !ptr.Deref(req.DryRun, false) {
		if err := c.mark(ctx, &p); err != nil {
			log.FromContext(ctx).Error(err, c.unmarked, c.keys...)
		}
	}
	return admission.Allowed("")
}
