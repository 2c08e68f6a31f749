package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Bundle is what the webhook configurations trust: the current CA, the
// staged one while it waits, and the previous one while it is kept.
func Bundle(data map[string][]byte) []byte {
	bundle := bytes.Clone(data[CACertKey])
	for _, k := range []string{NextCACertKey, PreviousCACertKey} {
		if ca := data[k]; len(ca) > 0 {
			if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
				bundle = append(bundle, '\n')
			}
			bundle = append(bundle, ca...)
		}
	}
	return bundle
}

// configuration is one webhook configuration the Rotator manages.
type configuration struct {
	kind, name string
	new        func() client.Object
}

// configurations lists the named webhook configurations.
func (r *Rotator) configurations() []configuration {
	var out []configuration
	for _, c := range []configuration{
		{"MutatingWebhookConfiguration", r.config.MutatingWebhookConfiguration,
			func() client.Object { return &admissionregistrationv1.MutatingWebhookConfiguration{} }},
		{"ValidatingWebhookConfiguration", r.config.ValidatingWebhookConfiguration,
			func() client.Object { return &admissionregistrationv1.ValidatingWebhookConfiguration{} }},
	} {
		if c.name != "" {
			out = append(out, c)
		}
	}
	return out
}

// injectBundle makes the CA bundle of every webhook in both configurations
// equal to bundle.
func (r *Rotator) injectBundle(ctx context.Context, bundle []byte) (pending bool, err error) {
	var errs []error
	for _, c := range r.configurations() {
		found, err := r.injectInto(ctx, c.kind, c.name, c.new, bundle)
		if err != nil {
			errs = append(errs, err)
		}
		pending = pending || !found
	}
	return pending, errors.Join(errs...)
}

// bundlesHold tells whether the CA bundle of every webhook in both
// configurations, as the API server returns it now, holds the certificate
// caPEM. A configuration that does not exist calls no webhook, so it holds
// nothing back.
func (r *Rotator) bundlesHold(ctx context.Context, caPEM []byte) (bool, error) {
	want, err := parseCert(caPEM)
	if err != nil {
		return false, err
	}
	for _, c := range r.configurations() {
		obj := c.new()
		if err := r.reader.Get(ctx, client.ObjectKey{Name: c.name}, obj); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return false, fmt.Errorf("getting %s %s: %w", c.kind, c.name, err)
		}
		_, bundles := webhookBundles(obj)
		for _, b := range bundles {
			if !holds(b, want) {
				return false, nil
			}
		}
	}
	return true, nil
}

// holds tells whether the PEM bundle contains cert.
func holds(bundle []byte, cert *x509.Certificate) bool {
	for {
		var block *pem.Block
		if block, bundle = pem.Decode(bundle); block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" && bytes.Equal(block.Bytes, cert.Raw) {
			return true
		}
	}
}

// injectInto patches one configuration. The patch tests each webhook's name
// at its index, so a concurrent edit of the list (a Helm upgrade) fails it
// rather than being overwritten; it is then read and patched again.
func (r *Rotator) injectInto(ctx context.Context, kind, name string, newObj func() client.Object, bundle []byte) (found bool, err error) {
	logger := log.FromContext(ctx).WithValues("kind", kind, "name", name)
	err = retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsInvalid(err)
	}, func() error {
		obj := newObj()
		if err := r.reader.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			return err
		}
		ops := bundlePatch(obj, bundle)
		if len(ops) == 0 {
			return nil
		}
		patch, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		if err := r.writer.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			return err
		}
		logger.Info("set the CA bundle", "webhooks", len(ops)/2)
		return nil
	})
	if apierrors.IsNotFound(err) {
		if !r.missing[name] {
			logger.Info("webhook configuration not found yet, will retry")
		}
		r.missing[name] = true
		return false, nil
	}
	delete(r.missing, name)
	if err != nil {
		return true, fmt.Errorf("setting the CA bundle of %s %s: %w", kind, name, err)
	}
	return true, nil
}

// bundlePatch is the JSON patch that sets bundle in every webhook of obj
// that does not have it yet.
func bundlePatch(obj client.Object, bundle []byte) []jsonpatch.Operation {
	names, current := webhookBundles(obj)
	var ops []jsonpatch.Operation
	for i := range names {
		if bytes.Equal(current[i], bundle) {
			continue
		}
		ops = append(ops,
			jsonpatch.NewOperation("test", fmt.Sprintf("/webhooks/%d/name", i), names[i]),
			jsonpatch.NewOperation("add", fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), bundle))
	}
	return ops
}

// webhookBundles returns the name and CA bundle of each webhook of a
// configuration, in order.
func webhookBundles(obj client.Object) (names []string, bundles [][]byte) {
	switch c := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			names, bundles = append(names, w.Name), append(bundles, w.ClientConfig.CABundle)
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for _, w := range c.Webhooks {
			names, bundles = append(names, w.Name), append(bundles, w.ClientConfig.CABundle)
		}
	}
	return names, bundles
}
