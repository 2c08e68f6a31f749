// Package releasekit holds what `make release` and `make release-push` do
// besides compiling: the release version check, the CycloneDX SBOM of a
// built binary, reproducible Helm chart archives, the SHA256SUMS file, and
// pushing the image and charts to an OCI registry. It is build tooling
// (hack/), not part of apportion.
package releasekit

import (
	"fmt"
	"regexp"
	"strings"
)

// releaseVersion is vMAJOR.MINOR.PATCH with an optional pre-release
// (semver 2.0.0: numbers without leading zeros, dot-separated identifiers
// of [0-9A-Za-z-]). Build metadata (+...) is refused: an OCI tag cannot
// carry "+".
var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)` +
	`(-(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?$`)

// ParseVersion checks a release version (v1.2.3, v1.2.3-rc.1) and returns
// it without the leading v: the chart's version and appVersion and the
// image tag (Karpenter tags its images the same way).
func ParseVersion(v string) (string, error) {
	if !releaseVersion.MatchString(v) {
		return "", fmt.Errorf("release version %q is not vMAJOR.MINOR.PATCH[-PRERELEASE] (semver, e.g. v1.2.3 or v1.2.3-rc.1)", v)
	}
	return strings.TrimPrefix(v, "v"), nil
}
