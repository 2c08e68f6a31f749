package releasekit

import (
	"crypto/sha256"
	"debug/buildinfo"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// SBOMOptions describe the binary an SBOM is written for.
type SBOMOptions struct {
	// Version is the release (v1.2.3), the version of the main component.
	Version string
	// Created is the SBOM's timestamp: the commit time
	// (SOURCE_DATE_EPOCH), so a commit gives the same SBOM every time.
	Created time.Time
}

// BinarySBOM reads the Go build information of the binary at path (the
// module versions `go version -m` prints) and returns a CycloneDX BOM:
// the binary as the application (with its SHA-256, its platform and build
// settings as properties), and each module linked in, plus the Go standard
// library, as a library component with its package URL. Modules replaced
// in go.mod are listed as their replacement.
func BinarySBOM(path string, o SBOMOptions) (*cdx.BOM, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the build information of %s: %w", path, err)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return nil, err
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	mainRef := purl(bi.Main.Path, o.Version)
	main := cdx.Component{
		BOMRef: mainRef, Type: cdx.ComponentTypeApplication, Name: bi.Main.Path, Version: o.Version,
		PackageURL: mainRef,
		Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sum}},
		Properties: buildProperties(bi, settings),
	}
	stdVersion := strings.TrimPrefix(bi.GoVersion, "go")
	std := cdx.Component{
		BOMRef: purl("stdlib", bi.GoVersion), Type: cdx.ComponentTypeLibrary, Name: "stdlib",
		Version: bi.GoVersion, PackageURL: purl("stdlib", bi.GoVersion),
		Description: "the Go standard library " + stdVersion,
	}
	components := []cdx.Component{std}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		c := cdx.Component{
			BOMRef: purl(m.Path, m.Version), Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version,
			PackageURL: purl(m.Path, m.Version),
		}
		if m.Sum != "" {
			// The go.sum hash (h1:, a hash of the module's file tree), which
			// `go mod verify` checks; not a hash of one file.
			c.Properties = &[]cdx.Property{{Name: "go:module:sum", Value: m.Sum}}
		}
		components = append(components, c)
	}
	sort.Slice(components, func(i, j int) bool { return components[i].BOMRef < components[j].BOMRef })
	deps := make([]string, len(components))
	for i, c := range components {
		deps[i] = c.BOMRef
	}

	bom := cdx.NewBOM()
	bom.SerialNumber = "urn:uuid:" + uuidFrom(sum)
	bom.Metadata = &cdx.Metadata{
		Timestamp: o.Created.UTC().Format(time.RFC3339),
		Component: &main,
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: "apportion hack/release",
			Description: "apportion's release tooling: the binary's Go build information, through github.com/CycloneDX/cyclonedx-go",
		}}},
	}
	bom.Components = &components
	bom.Dependencies = &[]cdx.Dependency{{Ref: mainRef, Dependencies: &deps}}
	return bom, nil
}

// WriteBinarySBOM writes BinarySBOM(bin) as CycloneDX JSON to out.
func WriteBinarySBOM(out io.Writer, bin string, o SBOMOptions) error {
	bom, err := BinarySBOM(bin, o)
	if err != nil {
		return err
	}
	enc := cdx.NewBOMEncoder(out, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	return enc.Encode(bom)
}

func buildProperties(bi *buildinfo.BuildInfo, settings map[string]string) *[]cdx.Property {
	props := []cdx.Property{{Name: "go:version", Value: bi.GoVersion}}
	for _, k := range []string{"GOOS", "GOARCH", "GOAMD64", "GOARM64", "CGO_ENABLED", "-trimpath", "-ldflags", "vcs.revision", "vcs.time", "vcs.modified"} {
		if v, ok := settings[k]; ok {
			props = append(props, cdx.Property{Name: "go:build:" + k, Value: v})
		}
	}
	return &props
}

// purl is the package URL of a Go module (pkg:golang/PATH@VERSION), the
// form the CycloneDX tools for Go write.
func purl(path, version string) string {
	if version == "" || version == "(devel)" {
		return "pkg:golang/" + path
	}
	return "pkg:golang/" + path + "@" + version
}

// uuidFrom derives the BOM's serial number from the binary's SHA-256 (hex),
// so the same binary gets the same SBOM; version 4 and variant bits are set
// as a random UUID would have them.
func uuidFrom(hexSum string) string {
	b := sha256.Sum256([]byte("apportion-sbom:" + hexSum))
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
