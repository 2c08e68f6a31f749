// Package version holds build information: the release, commit and build
// date are set with -ldflags -X at build time (see the Makefile), the Go and
// Karpenter versions are read from the binary's own build information.
package version

import (
	"runtime"
	"runtime/debug"
)

var (
	// Version is the release (a git tag such as v1.2.3) or "dev".
	Version = "dev"
	// Commit is the git commit the binary was built from.
	Commit = "unknown"
	// BuildDate is when the commit was made (RFC 3339, UTC), from
	// SOURCE_DATE_EPOCH so that a commit always builds the same binary;
	// "unknown" when not set.
	BuildDate = "unknown"
)

// KarpenterModule is the Karpenter module apportion is built against: its
// scheduling vocabulary and NodePool types are Karpenter's own.
const KarpenterModule = "sigs.k8s.io/karpenter"

// Info is the build information `apportion version` prints.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"buildDate"`
	// GoVersion is the Go release that compiled the binary.
	GoVersion string `json:"goVersion"`
	// KarpenterVersion is the version of the sigs.k8s.io/karpenter module
	// linked in ("unknown" when the binary carries no build information).
	KarpenterVersion string `json:"karpenterVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = debug.ReadBuildInfo

// Get returns the build information of the running binary.
func Get() Info {
	info := Info{
		Version:          Version,
		Commit:           Commit,
		BuildDate:        BuildDate,
		GoVersion:        runtime.Version(),
		KarpenterVersion: "unknown",
		Platform:         runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := readBuildInfo(); ok {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if v := moduleVersion(bi, KarpenterModule); v != "" {
			info.KarpenterVersion = v
		}
	}
	return info
}

// moduleVersion is the version of module path in bi, following a replace
// directive; "" when the module is not linked in.
func moduleVersion(bi *debug.BuildInfo, path string) string {
	for _, m := range bi.Deps {
		if m.Path != path {
			continue
		}
		if m.Replace != nil && m.Replace.Version != "" {
			return m.Replace.Version
		}
		return m.Version
	}
	return ""
}

// String is the one-line form `apportion version` prints.
func String() string {
	i := Get()
	return "apportion " + i.Version + " (commit " + i.Commit + ", built " + i.BuildDate + ", " + i.GoVersion +
		", karpenter " + i.KarpenterVersion + ", " + i.Platform + ")"
}
