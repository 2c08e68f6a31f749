package releasekit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestKrewPlugin: one archive per binary, holding it as kubectl-apportion
// (executable) with LICENSE, the same bytes on a second run, and a
// manifest whose sha256 values are the archives'.
func TestKrewPlugin(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("apportion_1.2.3_linux_amd64", "amd64 binary")
	write("apportion_1.2.3_linux_arm64", "arm64 binary")
	write("apportion_1.2.3_linux_amd64.cdx.json", "{}")
	write("apportion_1.2.3_image.oci.tar", "image")
	write("LICENSE", "license text")
	o := KrewOptions{Dir: dir, Version: "v1.2.3", URLBase: "https://example.test/r/", License: filepath.Join(dir, "LICENSE"), MTime: time.Unix(1700000000, 0)}
	platforms, err := WriteKrewPlugin(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(platforms) != 2 || platforms[0].Arch != "amd64" || platforms[1].Arch != "arm64" || platforms[0].URI != "https://example.test/r/kubectl-apportion_1.2.3_linux_amd64.tar.gz" {
		t.Fatalf("platforms: %+v", platforms)
	}
	first, err := os.ReadFile(filepath.Join(dir, "kubectl-apportion_1.2.3_linux_arm64.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, first)
	if files[PluginBinary].data != "arm64 binary" || files[PluginBinary].mode != 0o755 || files["LICENSE"].data != "license text" || len(files) != 2 {
		t.Fatalf("archive: %+v", files)
	}
	if _, err := WriteKrewPlugin(o); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(filepath.Join(dir, "kubectl-apportion_1.2.3_linux_arm64.tar.gz"))
	if !bytes.Equal(first, second) {
		t.Fatal("two runs give different archives")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "apportion.krew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string
		Metadata   struct{ Name string }
		Spec       struct {
			Version   string
			Platforms []struct {
				Selector         struct{ MatchLabels map[string]string }
				URI, SHA256, Bin string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatalf("manifest: %v\n%s", err, raw)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Metadata.Name != "apportion" || m.Kind != "Plugin" || m.Spec.Version != "v1.2.3" || len(m.Spec.Platforms) != 2 {
		t.Fatalf("manifest: %+v", m)
	}
	for _, p := range m.Spec.Platforms {
		sum, err := fileSHA256(filepath.Join(dir, filepath.Base(p.URI)))
		if err != nil || sum != p.SHA256 || p.Bin != PluginBinary || p.Selector.MatchLabels["os"] != "linux" {
			t.Fatalf("platform %+v: archive sha256 %s, %v", p, sum, err)
		}
	}
	if _, err := WriteKrewPlugin(KrewOptions{Dir: t.TempDir(), Version: "v1.2.3", License: o.License}); err == nil || !strings.Contains(err.Error(), "no binary") {
		t.Fatalf("no binaries: %v", err)
	}
}

// TestKrewPluginEveryPlatform: a release's binaries for linux, darwin and
// windows (the .exe) each get an archive and a manifest entry with krew's
// os and arch labels; on windows the plugin is kubectl-apportion.exe, in
// the archive and as the manifest's bin. The SBOMs (.exe.cdx.json
// included) and a windows binary without .exe are not plugins.
func TestKrewPluginEveryPlatform(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{} // os/arch: the archive's binary
	for _, p := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64", "windows_amd64.exe"} {
		name := "apportion_1.2.3_" + p
		write(name, p+" binary")
		write(name+".cdx.json", "{}")
		want[strings.Replace(strings.TrimSuffix(p, ".exe"), "_", "/", 1)] = p + " binary"
	}
	write("apportion_1.2.3_windows_arm64", "no .exe")
	write("apportion_1.2.3_image.oci.tar", "image")
	write("LICENSE", "license text")
	if _, err := WriteKrewPlugin(KrewOptions{Dir: dir, Version: "v1.2.3", URLBase: "https://example.test/r", License: filepath.Join(dir, "LICENSE"), MTime: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "apportion.krew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Spec struct {
			Platforms []struct {
				Selector         struct{ MatchLabels map[string]string }
				URI, SHA256, Bin string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatalf("manifest: %v\n%s", err, raw)
	}
	got := map[string]string{}
	for _, p := range m.Spec.Platforms {
		goos, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		wantBin := PluginBinary
		if goos == "windows" {
			wantBin += ".exe"
		}
		if p.Bin != wantBin || p.URI != "https://example.test/r/kubectl-apportion_1.2.3_"+goos+"_"+arch+".tar.gz" {
			t.Errorf("platform %s/%s: bin %q, uri %s", goos, arch, p.Bin, p.URI)
		}
		archive, err := os.ReadFile(filepath.Join(dir, filepath.Base(p.URI)))
		if err != nil {
			t.Fatal(err)
		}
		if sum, _ := fileSHA256(filepath.Join(dir, filepath.Base(p.URI))); sum != p.SHA256 {
			t.Errorf("platform %s/%s: sha256 %s, archive %s", goos, arch, p.SHA256, sum)
		}
		files := untar(t, archive)
		if len(files) != 2 || files[wantBin].mode != 0o755 || files["LICENSE"].data != "license text" {
			t.Errorf("platform %s/%s: archive %+v", goos, arch, files)
		}
		got[goos+"/"+arch] = files[wantBin].data
	}
	if !maps.Equal(got, want) {
		t.Fatalf("the manifest's platforms and their binaries:\n got %v\nwant %v\n%s", got, want, raw)
	}
}

type tarFile struct {
	data string
	mode int64
}

func untar(t *testing.T, b []byte) map[string]tarFile {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]tarFile{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out[h.Name] = tarFile{string(data), h.Mode}
	}
}
