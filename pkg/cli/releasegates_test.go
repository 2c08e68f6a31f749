package cli

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/test"
)

func gatedPod(namespace, name string, gates ...string) *corev1.Pod {
	return test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Gates: gates})
}

// podCluster is a fake API server. Listing by metadata.name, as the retry
// does, needs the index the real API server has built in.
func podCluster(funcs *interceptor.Funcs, pods ...client.Object) (client.Client, client.WithWatch) {
	base := fake.NewClientBuilder().WithScheme(test.Scheme()).WithObjects(pods...).
		WithIndex(&corev1.Pod{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).Build()
	if funcs == nil {
		return base, base
	}
	return interceptor.NewClient(base, *funcs), base
}

func gatesOf(t *testing.T, c client.Reader, namespace, name string) []string {
	t.Helper()
	var pod corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range pod.Spec.SchedulingGates {
		names = append(names, g.Name)
	}
	return names
}

func runRelease(c client.Client, namespace string, dryRun bool) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = releaseGates(context.Background(), c, namespace, dryRun, &out, &errOut)
	return code, out.String(), errOut.String()
}

const gate = annotations.PlacementGate

func TestReleaseGates(t *testing.T) {
	pods := []client.Object{
		gatedPod("web", "only", gate),
		gatedPod("web", "first", gate, "example.com/other"),
		gatedPod("web", "last", "example.com/other", gate),
		gatedPod("db", "middle", "a.example.com/x", gate, "b.example.com/y"),
		gatedPod("web", "other-gate", "example.com/other"),
		gatedPod("db", "none"),
	}
	var limits []int64
	funcs := &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		var o client.ListOptions
		o.ApplyOptions(opts)
		if o.FieldSelector == nil {
			limits = append(limits, o.Limit)
		}
		return c.List(ctx, list, opts...)
	}}

	c, base := podCluster(funcs, pods...)
	code, out, errOut := runRelease(c, "", true)
	if code != ExitOK || out != "would release 4 pod(s) (dry run)\n" || errOut != "" {
		t.Errorf("dry run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := gatesOf(t, base, "web", "only"); len(got) != 1 {
		t.Errorf("dry run changed a pod: gates %v", got)
	}

	code, out, errOut = runRelease(c, "web", false)
	if code != ExitOK || out != "released 3 pod(s) (0 failed)\n" || errOut != "" {
		t.Errorf("--namespace web: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := gatesOf(t, base, "db", "middle"); len(got) != 3 {
		t.Errorf("a pod of another namespace was changed: gates %v", got)
	}

	code, out, errOut = runRelease(c, "", false)
	if code != ExitOK || out != "released 1 pod(s) (0 failed)\n" || errOut != "" {
		t.Errorf("all namespaces: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, tc := range []struct {
		namespace, name string
		want            []string
	}{
		{"web", "only", nil},
		{"web", "first", []string{"example.com/other"}},
		{"web", "last", []string{"example.com/other"}},
		{"db", "middle", []string{"a.example.com/x", "b.example.com/y"}},
		{"web", "other-gate", []string{"example.com/other"}},
		{"db", "none", nil},
	} {
		if got := gatesOf(t, base, tc.namespace, tc.name); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s/%s: gates %v, want %v", tc.namespace, tc.name, got, tc.want)
		}
	}
	for _, l := range limits {
		if l != listPageSize {
			t.Errorf("a List asked for %d pods, want pages of %d", l, listPageSize)
		}
	}
}

// TestReleaseGatesFollowsPages serves the pods two per page, as the API
// server does with a Limit.
func TestReleaseGatesFollowsPages(t *testing.T) {
	var pods []client.Object
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		pods = append(pods, gatedPod("web", name, gate))
	}
	pages := 0
	funcs := &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if err := c.List(ctx, list, opts...); err != nil {
			return err
		}
		var o client.ListOptions
		o.ApplyOptions(opts)
		pl, ok := list.(*corev1.PodList)
		if !ok || o.FieldSelector != nil {
			return nil
		}
		pages++
		from := 0
		if o.Continue != "" {
			from = int(o.Continue[0] - '0')
		}
		to := min(from+2, len(pl.Items))
		pl.Items, pl.Continue = pl.Items[from:to], ""
		if to < 5 {
			pl.Continue = string(rune('0' + to))
		}
		return nil
	}}
	c, _ := podCluster(funcs, pods...)
	code, out, _ := runRelease(c, "", false)
	if code != ExitOK || out != "released 5 pod(s) (0 failed)\n" || pages != 3 {
		t.Errorf("exit %d, stdout %q after %d pages; want 5 pods in 3 pages", code, out, pages)
	}
}

// TestReleaseGatesRereadsAChangedPod: another gate is added in front of
// apportion's between the List and the patch. The patch's test fails (422,
// as the API server reports a failed JSON patch test), the pod is read
// again, and only apportion's gate goes.
func TestReleaseGatesRereadsAChangedPod(t *testing.T) {
	changed := false
	funcs := &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if !changed {
			changed = true
			var pod corev1.Pod
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &pod); err != nil {
				return err
			}
			pod.Spec.SchedulingGates = append([]corev1.PodSchedulingGate{{Name: "example.com/new"}}, pod.Spec.SchedulingGates...)
			if err := c.Update(ctx, &pod); err != nil {
				return err
			}
		}
		if err := c.Patch(ctx, obj, patch, opts...); err != nil {
			return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{Resource: "pods"}, obj.GetName(), err.Error(), 0, false)
		}
		return nil
	}}
	c, base := podCluster(funcs, gatedPod("web", "p", gate, "example.com/other"))
	code, out, errOut := runRelease(c, "", false)
	if code != ExitOK || out != "released 1 pod(s) (0 failed)\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := gatesOf(t, base, "web", "p"); strings.Join(got, ",") != "example.com/new,example.com/other" {
		t.Errorf("gates %v, want the two others kept", got)
	}
}

func TestReleaseGatesReportsFailures(t *testing.T) {
	funcs := &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if obj.GetName() == "denied" {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, obj.GetName(), errors.New("no patch for you"))
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
	c, _ := podCluster(funcs, gatedPod("web", "denied", gate), gatedPod("web", "fine", gate))
	code, out, errOut := runRelease(c, "", false)
	if code != ExitFailure || out != "released 1 pod(s) (1 failed)\n" {
		t.Errorf("exit %d, stdout %q; want exit 1 and one failure", code, out)
	}
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "web/denied") || !strings.Contains(lines[0], "no patch for you") {
		t.Errorf("stderr %q, want one line naming web/denied and the reason", errOut)
	}

	listFails := &interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no list for you"))
	}}
	c, _ = podCluster(listFails)
	for _, dryRun := range []bool{false, true} {
		if code, out, errOut := runRelease(c, "", dryRun); code != ExitFailure || out != "" || !strings.Contains(errOut, "listing pods") {
			t.Errorf("failed List, dry run %v: exit %d, stdout %q, stderr %q; want exit 1, the error and no count", dryRun, code, out, errOut)
		}
	}
}

// TestReleaseGatesUnreachable: against a server that does not answer,
// release-gates says the error, not a count of the pods it never saw.
func TestReleaseGatesUnreachable(t *testing.T) {
	t.Setenv("KUBECONFIG", kubeconfig(t, "https://127.0.0.1:1"))
	for _, args := range [][]string{{"release-gates", "--dry-run"}, {"release-gates", "-A"}} {
		code, out, errOut := run(t, "", args...)
		if code != ExitFailure || out != "" || !strings.Contains(errOut, "listing pods") || !strings.Contains(errOut, "127.0.0.1:1") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 and the error alone", args, code, out, errOut)
		}
	}
}

// TestReleaseGatesListFailsAfterReleasing: pods released before the list
// failed are reported, with the error.
func TestReleaseGatesListFailsAfterReleasing(t *testing.T) {
	funcs := &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		var o client.ListOptions
		o.ApplyOptions(opts)
		if o.Continue != "" {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no second page for you"))
		}
		if err := c.List(ctx, list, opts...); err != nil {
			return err
		}
		if pl, ok := list.(*corev1.PodList); ok && o.FieldSelector == nil {
			pl.Items, pl.Continue = pl.Items[:1], "1"
		}
		return nil
	}}
	c, _ := podCluster(funcs, gatedPod("web", "a", gate), gatedPod("web", "b", gate))
	code, out, errOut := runRelease(c, "", false)
	if code != ExitFailure || out != "released 1 pod(s) (0 failed)\n" || !strings.Contains(errOut, "listing pods") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1, the one pod released and the error", code, out, errOut)
	}
}

func TestReleaseGatesUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"release-gates", "extra"}, `unexpected argument "extra"`},
		{[]string{"release-gates", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"release-gates", "-n", "Not_A_Namespace"}, "--namespace"},
		{[]string{"release-gates", "-dry-run"}, "long flags take two dashes: --dry-run"},
		{[]string{"release-gates", "-A", "-n", "shop"}, "exclude each other"},
		{[]string{"release-gates", "--namespace", "Not_A_Namespace"}, "--namespace"},
	} {
		code, out, errOut := run(t, "", tc.args...)
		if code != ExitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and one line containing %q", tc.args, code, out, errOut, tc.want)
		}
	}
	code, out, _ := run(t, "", "release-gates", "-h")
	if code != ExitOK || !strings.Contains(out, "released N pod(s) (M failed)") {
		t.Errorf("-h: exit %d, stdout %q", code, out)
	}
	if _, out, _ := run(t, "", "help"); !strings.Contains(out, "\n  release-gates ") {
		t.Errorf("usage does not list release-gates:\n%s", out)
	}
}
