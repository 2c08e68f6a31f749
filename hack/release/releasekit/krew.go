package releasekit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
	"time"
)

// PluginBinary is the name kubectl finds the plugin under.
const PluginBinary = "kubectl-apportion"

// KrewOptions say what WriteKrewPlugin packages.
type KrewOptions struct {
	// Dir holds the release's binaries, apportion_X.Y.Z_OS_ARCH; the
	// archives and the manifest are written there.
	Dir     string
	Version string // vX.Y.Z
	// URLBase is where the archives will be downloaded from (the
	// release's page); the manifest's uris are URLBase/ARCHIVE.
	URLBase string
	// License is the LICENSE file put into every archive.
	License string
	MTime   time.Time
}

// KrewPlatform is one platform of the manifest. Bin is the plugin's file in
// its archive: kubectl-apportion, with .exe on Windows (krew runs it by
// that name there).
type KrewPlatform struct {
	OS, Arch, URI, SHA256, Bin string
}

// WriteKrewPlugin writes, for each binary of the release
// (apportion_X.Y.Z_OS_ARCH, with .exe for windows), the plugin archive
// kubectl-apportion_X.Y.Z_OS_ARCH.tar.gz (the binary as kubectl-apportion
// or kubectl-apportion.exe, and LICENSE; reproducible like the charts),
// and the krew plugin manifest apportion.krew.yaml listing them: `kubectl
// krew install --manifest=apportion.krew.yaml --archive=ARCHIVE` installs
// the plugin from the files, as krew's own docs test a plugin. krew
// unpacks tar.gz on every platform, Windows included.
func WriteKrewPlugin(o KrewOptions) ([]KrewPlatform, error) {
	tag, err := ParseVersion(o.Version)
	if err != nil {
		return nil, err
	}
	license, err := os.ReadFile(o.License)
	if err != nil {
		return nil, err
	}
	bins, err := filepath.Glob(filepath.Join(o.Dir, "apportion_"+tag+"_*_*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(bins)
	var platforms []KrewPlatform
	for _, bin := range bins {
		osArch := strings.TrimPrefix(filepath.Base(bin), "apportion_"+tag+"_")
		goos, arch, ok := strings.Cut(osArch, "_")
		pluginBin := PluginBinary
		if goos == "windows" {
			// Only the .exe: windows_amd64 alone would not run there.
			if arch, ok = strings.CutSuffix(arch, ".exe"); !ok {
				continue
			}
			pluginBin += ".exe"
		}
		if !ok || strings.ContainsAny(arch, "._") { // SBOMs, the image archive
			continue
		}
		name := fmt.Sprintf("%s_%s_%s_%s.tar.gz", PluginBinary, tag, goos, arch)
		b, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		archive, err := pluginArchive(pluginBin, b, license, o.MTime)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(o.Dir, name), archive, 0o644); err != nil {
			return nil, err
		}
		sum, err := fileSHA256(filepath.Join(o.Dir, name))
		if err != nil {
			return nil, err
		}
		platforms = append(platforms, KrewPlatform{OS: goos, Arch: arch, URI: strings.TrimSuffix(o.URLBase, "/") + "/" + name, SHA256: sum, Bin: pluginBin})
	}
	if len(platforms) == 0 {
		return nil, fmt.Errorf("no binary apportion_%s_OS_ARCH in %s", tag, o.Dir)
	}
	var manifest bytes.Buffer
	if err := krewManifest.Execute(&manifest, struct {
		Version   string
		Platforms []KrewPlatform
	}{o.Version, platforms}); err != nil {
		return nil, err
	}
	return platforms, os.WriteFile(filepath.Join(o.Dir, "apportion.krew.yaml"), manifest.Bytes(), 0o644)
}

// pluginArchive is a tar.gz of the binary as name and LICENSE.
func pluginArchive(name string, bin, license []byte, mtime time.Time) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{name, 0o755, bin}, {"LICENSE", 0o644, license}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime.UTC()}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

var krewManifest = template.Must(template.New("krew").Parse(`apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: apportion
spec:
  version: {{ .Version }}
  homepage: https://github.com/apportion-dev/apportion
  shortDescription: Explain proportional pod placement on Karpenter clusters
  description: |
    Shows where apportion placed a pod and why (its group, NodePool, the counts it
    was decided against, fallbacks, architectures), and each workload's split now
    by node labels against the quota of its strategy, with drift and the groups
    left out: kubectl apportion explain deployment/web, kubectl apportion status -A.
  platforms:
{{- range .Platforms }}
  - selector:
      matchLabels:
        os: {{ .OS }}
        arch: {{ .Arch }}
    uri: {{ .URI }}
    sha256: {{ .SHA256 }}
    bin: {{ .Bin }}
{{- end }}
`))
