package test

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// FailPatches returns interceptor functions whose first n Patch calls fail
// with err; the later ones reach the wrapped client.
func FailPatches(n int, err error) interceptor.Funcs {
	return interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if n > 0 {
				n--
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}
}

// Objects is objs as client.Objects, for a fake client's WithObjects.
func Objects[T client.Object](objs ...T) []client.Object {
	out := make([]client.Object, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}
