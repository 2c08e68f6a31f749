package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"
)

// inspectRegistry is an in-memory registry on 127.0.0.1 requiring basic auth
// robot:hunter2 for the repositories under private/.
func inspectRegistry(t *testing.T) string {
	t.Helper()
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/private/") {
			if u, p, ok := r.BasicAuth(); !ok || u != "robot" || p != "hunter2" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("registry on %s, want 127.0.0.1", host)
	}
	// No docker credentials of the machine running the tests.
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	return host
}

func platformImage(t *testing.T, os, arch, variant string) v1.Image {
	t.Helper()
	img, err := random.Image(32, 1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = os, arch, variant
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

func pushIndex(t *testing.T, ref string, platforms ...v1.Platform) {
	t.Helper()
	var idx v1.ImageIndex = empty.Index
	for _, p := range platforms {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        platformImage(t, p.OS, p.Architecture, p.Variant),
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	// An attestation, as BuildKit adds: not a platform.
	idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
		Add: platformImage(t, "unknown", "unknown", ""),
		Descriptor: v1.Descriptor{
			Platform:    &v1.Platform{OS: "unknown", Architecture: "unknown"},
			Annotations: map[string]string{"vnd.docker.reference.type": "attestation-manifest"},
		},
	})
	if err := remote.WriteIndex(parseRef(t, ref), idx, remote.WithAuth(&authn.Basic{Username: "robot", Password: "hunter2"})); err != nil {
		t.Fatal(err)
	}
}

func pushSingle(t *testing.T, ref, arch, variant string) {
	t.Helper()
	if err := remote.Write(parseRef(t, ref), platformImage(t, "linux", arch, variant), remote.WithAuth(&authn.Basic{Username: "robot", Password: "hunter2"})); err != nil {
		t.Fatal(err)
	}
}

func parseRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func runInspect(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(append([]string{"inspect"}, args...), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestInspectJSON(t *testing.T) {
	host := inspectRegistry(t)
	multi, arm := host+"/public/multi:1.0", host+"/public/arm:1.0"
	pushIndex(t, multi, v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, v1.Platform{OS: "windows", Architecture: "amd64"})
	pushSingle(t, arm, "arm64", "v8")

	code, stdout, stderr := runInspect("-o", "json", multi, arm, multi)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var out struct {
		Images []struct {
			Reference string   `json:"reference"`
			Platforms []string `json:"platforms"`
		} `json:"images"`
		Architectures []string `json:"architectures"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v in %q", err, stdout)
	}
	if len(out.Images) != 2 || out.Images[0].Reference != multi || out.Images[1].Reference != arm {
		t.Fatalf("images = %+v, want %s then %s once each", out.Images, multi, arm)
	}
	if want := []string{"linux/amd64", "linux/arm64/v8", "windows/amd64"}; !slices.Equal(out.Images[0].Platforms, want) {
		t.Errorf("%s platforms = %v, want %v", multi, out.Images[0].Platforms, want)
	}
	if want := []string{"linux/arm64/v8"}; !slices.Equal(out.Images[1].Platforms, want) {
		t.Errorf("%s platforms = %v, want %v", arm, out.Images[1].Platforms, want)
	}
	if !slices.Equal(out.Architectures, []string{"arm64"}) {
		t.Errorf("architectures = %v, want [arm64]", out.Architectures)
	}
}

func TestInspectTable(t *testing.T) {
	host := inspectRegistry(t)
	amd, arm := host+"/public/amd:1", host+"/public/arm:1"
	pushSingle(t, amd, "amd64", "")
	pushSingle(t, arm, "arm64", "")
	// Flags after the images, too.
	code, stdout, stderr := runInspect(amd, arm, "--timeout", "10s")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"IMAGE", amd + "  linux/amd64", arm + "  linux/arm64", "linux architectures of all images: none"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

// TestInspectYAMLAndWide: -o yaml has the JSON's content; -o wide adds the
// linux architectures of each image.
func TestInspectYAMLAndWide(t *testing.T) {
	host := inspectRegistry(t)
	multi, win := host+"/public/multi:2", host+"/public/win:2"
	pushIndex(t, multi, v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"})
	pushIndex(t, win, v1.Platform{OS: "windows", Architecture: "amd64"})
	_, jsonOut, _ := runInspect("-o", "json", multi, win)
	code, yamlOut, stderr := runInspect(multi, win, "-o", "yaml")
	if code != ExitOK {
		t.Fatalf("-o yaml: exit %d, %s", code, stderr)
	}
	var fromJSON, fromYAML map[string]any
	if err := json.Unmarshal([]byte(jsonOut), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(yamlOut), &fromYAML); err != nil {
		t.Fatalf("%v\n%s", err, yamlOut)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) || len(fromJSON["images"].([]any)) != 2 {
		t.Errorf("yaml and json differ:\n%s\n%s", yamlOut, jsonOut)
	}
	code, wide, _ := runInspect("-o", "wide", multi, win)
	if code != ExitOK || !regexp.MustCompile(`(?m)^IMAGE +LINUX ARCHITECTURES +PLATFORMS$`).MatchString(wide) ||
		!regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(multi)+` +amd64,arm64 +linux/amd64 linux/arm64/v8$`).MatchString(wide) ||
		!regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(win)+` +<none> +windows/amd64$`).MatchString(wide) {
		t.Errorf("wide (exit %d):\n%s", code, wide)
	}
}

func TestInspectPullSecret(t *testing.T) {
	host := inspectRegistry(t)
	ref := host + "/private/app:v2"
	pushIndex(t, ref, v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Platform{OS: "linux", Architecture: "arm64"})

	code, _, stderr := runInspect(ref)
	if code != ExitFailure || !strings.Contains(stderr, ref) {
		t.Errorf("without credentials: exit %d, stderr %q; want 1 naming the image", code, stderr)
	}

	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"username": "robot", "password": "hunter2"}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(file, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runInspect("--pull-secret", file, "-o", "json", ref)
	if code != ExitOK {
		t.Fatalf("with --pull-secret: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, `"architectures": [`) || !strings.Contains(stdout, `"amd64",`) || !strings.Contains(stdout, `"arm64"`) {
		t.Errorf("output %s", stdout)
	}
	if strings.Contains(stdout+stderr, "hunter2") {
		t.Error("the password is printed")
	}
}

func TestInspectFailures(t *testing.T) {
	host := inspectRegistry(t)
	good := host + "/public/good:1"
	pushSingle(t, good, "amd64", "")
	notJSON := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(notJSON, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		args       []string
		code       int
		stderrHas  []string
		stdoutNone bool
	}{
		{"no image", nil, ExitUsage, []string{"no image"}, true},
		{"only flags", []string{"-o", "json"}, ExitUsage, []string{"no image"}, true},
		{"bad output", []string{"-o", "xml", good}, ExitUsage, []string{"unknown output format"}, true},
		{"single-dash long flag", []string{"-timeout=5s", good}, ExitUsage, []string{"--timeout=5s"}, true},
		{"unknown flag", []string{"--nope", good}, ExitUsage, []string{"nope"}, true},
		{"bad timeout", []string{"--timeout", "soon", good}, ExitUsage, []string{"timeout"}, true},
		{"zero timeout", []string{"--timeout", "0s", good}, ExitUsage, []string{"--timeout must be positive"}, true},
		{"missing pull secret", []string{"--pull-secret", "/nonexistent/config.json", good}, ExitUsage, []string{"/nonexistent/config.json"}, true},
		{"pull secret not json", []string{"--pull-secret", notJSON, good}, ExitUsage, []string{notJSON, "not a docker config JSON"}, true},
		{"not found", []string{good, host + "/public/gone:1"}, ExitFailure, []string{host + "/public/gone:1"}, true},
		{"bad reference", []string{good, "UPPER/Case:x"}, ExitUsage, []string{"invalid image reference", "UPPER/Case:x"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runInspect(c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, c.code, stderr)
			}
			for _, s := range c.stderrHas {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr %q lacks %q", stderr, s)
				}
			}
			if c.stdoutNone && stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if !strings.HasPrefix(stderr, "apportion inspect: ") {
				t.Errorf("stderr %q does not start with the command", stderr)
			}
		})
	}
}

func TestInspectHelp(t *testing.T) {
	code, stdout, _ := runInspect("-h")
	if code != ExitOK || !strings.Contains(stdout, "Usage:\n  apportion inspect IMAGE...") {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
}
