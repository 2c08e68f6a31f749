package releasekit

import "errors"

// Keyless signing: cosign asks the CI for an OIDC token (GitHub Actions
// with `permissions: id-token: write` gives one to cosign without any
// flag), gets a short-lived certificate for that identity from Fulcio and
// records each signature in the Rekor transparency log. Users verify the
// identity (--certificate-identity-regexp, --certificate-oidc-issuer)
// instead of a key; docs/verifying-releases.md shows how.

// signArgs are the flags of every `cosign sign` and `cosign attest` of a
// release.
func signArgs(s SignOptions) []string {
	if s.Keyless {
		// The transparency log is what keyless verification checks: it
		// stays on (cosign's default).
		return []string{"--yes"}
	}
	// No transparency log: the release is signed offline, and verified
	// with --key (and --insecure-ignore-tlog).
	return []string{"--key", s.Key, "--tlog-upload=false", "--yes"}
}

// checkKeyless refuses a key and keyless signing at once: which one signs
// decides how users verify, so it is never guessed.
func checkKeyless(s SignOptions) error {
	if s.Keyless && s.Key != "" {
		return errors.New("a cosign key and KEYLESS: choose one")
	}
	return nil
}
