//go:build chart

package chartrender

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	kataRemote = `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","quantity":"1","keepRequests":true}]`
	kataQemu   = `[{"runtimeClassName":"kata-qemu","resource":"kata.peerpods.io/vm"}]`
	kataSized  = `[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","vmSizing":true}]`
	// notesObject is the ConfigMap withNotes adds; its data.notes is the
	// rendered NOTES.txt.
	notesObject = "notes-under-test"
)

// withNotes copies chart/ into a temporary folder with one more template:
// a ConfigMap whose data.notes is NOTES.txt rendered with the same values.
// helm template renders NOTES.txt but never prints it, and helm install
// --dry-run wants a cluster.
func withNotes(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "chart")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"_notes_under_test.tpl": `{{- define "chartrender.notes" -}}` + "\n" + string(notes) + `{{- end }}` + "\n",
		"notes-under-test.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + notesObject +
			"\ndata:\n  notes: {{ include \"chartrender.notes\" . | toJson }}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, "templates", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// envValue is the value of the apportion container's environment variable.
func envValue(t *testing.T, deploy *unstructured.Unstructured, name string) string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		env, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
		for _, e := range env {
			if e := e.(map[string]any); e["name"] == name {
				v, _ := e["value"].(string)
				return v
			}
		}
	}
	t.Fatalf("Deployment %s: no container sets %s", deploy.GetName(), name)
	return ""
}

// setJSON is helm's --set-json flag for each name=JSON value.
func setJSON(values []string) []string {
	var flags []string
	for _, v := range values {
		flags = append(flags, "--set-json", v)
	}
	return flags
}

func sameJSON(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("%q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%q is not JSON: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

// The profiles moved from the top-level runtimeClassProfiles to
// settings.runtimeClassProfiles; values files of earlier releases keep
// working, with a notice in NOTES.txt.
func TestRuntimeClassProfiles(t *testing.T) {
	chart := withNotes(t)
	for _, tc := range []struct {
		name   string
		values []string // name=JSON, for --set-json
		want   string   // RUNTIME_CLASS_PROFILES
		notice bool     // NOTES.txt names the deprecated key
	}{
		{name: "default", want: "[]"},
		{name: "settings.runtimeClassProfiles", values: []string{"settings.runtimeClassProfiles=" + kataRemote}, want: kataRemote},
		{name: "vmSizing passed through", values: []string{"settings.runtimeClassProfiles=" + kataSized}, want: kataSized},
		{name: "deprecated top-level key", values: []string{"runtimeClassProfiles=" + kataRemote}, want: kataRemote, notice: true},
		{name: "both, the same list", values: []string{"settings.runtimeClassProfiles=" + kataRemote, "runtimeClassProfiles=" + kataRemote},
			want: kataRemote, notice: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmTemplate(t, chart, setJSON(tc.values)...)
			if err != nil {
				t.Fatal(err)
			}
			objs := objects(t, out)
			if got := envValue(t, get(t, objs, "Deployment", release), "RUNTIME_CLASS_PROFILES"); !sameJSON(t, got, tc.want) {
				t.Errorf("RUNTIME_CLASS_PROFILES = %s, want %s", got, tc.want)
			}
			notes := str(get(t, objs, "ConfigMap", notesObject), "data", "notes")
			notice := strings.Contains(notes, "DEPRECATED") && strings.Contains(notes, "settings.runtimeClassProfiles")
			if notice != tc.notice {
				t.Errorf("deprecation notice in NOTES.txt: %t, want %t\n%s", notice, tc.notice, notes)
			}
		})
	}
}

// Two different lists fail the render rather than one silently winning, and
// the deprecated key gets the same schema checks as the new one.
func TestRuntimeClassProfilesRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   string // in helm's error
	}{
		{name: "both keys, different lists", values: []string{"settings.runtimeClassProfiles=" + kataRemote, "runtimeClassProfiles=" + kataQemu},
			want: "settings.runtimeClassProfiles and the deprecated top-level runtimeClassProfiles are both set, to different lists"},
		{name: "settings key, bad entry", values: []string{`settings.runtimeClassProfiles=[{"runtimeClassName":"kata-remote","resource":"vm"}]`},
			want: "at '/settings/runtimeClassProfiles/0/resource'"},
		{name: "deprecated key, bad entry", values: []string{`runtimeClassProfiles=[{"runtimeClassName":"kata-remote","resource":"vm"}]`},
			want: "at '/runtimeClassProfiles/0/resource'"},
		{name: "deprecated key, unknown field", values: []string{`runtimeClassProfiles=[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","count":2}]`},
			want: "additional properties 'count' not allowed"},
		{name: "vmSizing not a boolean", values: []string{`settings.runtimeClassProfiles=[{"runtimeClassName":"kata-remote","resource":"kata.peerpods.io/vm","vmSizing":"yes"}]`},
			want: "at '/settings/runtimeClassProfiles/0/vmSizing'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, chartDir, setJSON(tc.values)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template with %v: error %v, want one containing %q", tc.values, err, tc.want)
			}
		})
	}
}
