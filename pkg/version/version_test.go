package version

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// goModRequire is the version go.mod requires of module (no replace
// directives are in use).
func goModRequire(t *testing.T, module string) string {
	t.Helper()
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("go.mod does not require %s", module)
	return ""
}

// TestGetReportsTheLinkedKarpenter builds a program that prints Get() (a
// test binary's build information lists no dependencies, so the test
// cannot ask itself) with the release's -X flags, and checks every field.
func TestGetReportsTheLinkedKarpenter(t *testing.T) {
	want := Info{
		Version: "v9.8.7-test", Commit: "0123abc", BuildDate: "2026-01-02T03:04:05Z",
		GoVersion: runtime.Version(), KarpenterVersion: goModRequire(t, KarpenterModule),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	bin := filepath.Join(t.TempDir(), "printinfo")
	const pkg = "github.com/apportion-dev/apportion/pkg/version"
	ldflags := "-X " + pkg + ".Version=" + want.Version + " -X " + pkg + ".Commit=" + want.Commit + " -X " + pkg + ".BuildDate=" + want.BuildDate
	// Built as this test binary was (the same cgo setting, race detector
	// and paths), so that every package it links is in the build cache
	// already: with other flags, the first run compiles Karpenter and its
	// dependencies once more.
	args := []string{"build", "-ldflags", ldflags, "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./testdata/printinfo")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/printinfo: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	var got Info
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got != want {
		t.Errorf("Get() of a built program:\n got %+v\nwant %+v", got, want)
	}
}

func TestGetFollowsReplaceAndMissingBuildInfo(t *testing.T) {
	orig := readBuildInfo
	t.Cleanup(func() { readBuildInfo = orig })

	readBuildInfo = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.99.1", Deps: []*debug.Module{
			{Path: "sigs.k8s.io/karpenter-other", Version: "v9.9.9"},
			{Path: KarpenterModule, Version: "v1.15.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.15.1-fork"}},
		}}, true
	}
	if got := Get(); got.KarpenterVersion != "v1.15.1-fork" || got.GoVersion != "go1.99.1" {
		t.Errorf("with a replaced module: %+v", got)
	}

	readBuildInfo = func() (*debug.BuildInfo, bool) { return nil, false }
	if got := Get(); got.KarpenterVersion != "unknown" || got.GoVersion != runtime.Version() {
		t.Errorf("without build information: %+v", got)
	}
}

func TestInfoJSONFieldNames(t *testing.T) {
	b, err := json.Marshal(Info{Version: "v1.2.3", Commit: "abc", BuildDate: "2026-01-02T03:04:05Z", GoVersion: "go1.26.9", KarpenterVersion: "v1.15.0", Platform: "linux/arm64"})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"version":"v1.2.3","commit":"abc","buildDate":"2026-01-02T03:04:05Z","goVersion":"go1.26.9","karpenterVersion":"v1.15.0","platform":"linux/arm64"}`
	if string(b) != want {
		t.Errorf("JSON:\n got %s\nwant %s", b, want)
	}
}

func TestStringNamesEveryField(t *testing.T) {
	s := String()
	i := Get()
	for _, v := range []string{i.Version, i.Commit, i.BuildDate, i.GoVersion, i.KarpenterVersion, i.Platform} {
		if !strings.Contains(s, v) {
			t.Errorf("String() = %q does not name %q", s, v)
		}
	}
}
