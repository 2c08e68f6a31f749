package imagearch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/apportion-dev/apportion/pkg/metrics"
	"github.com/apportion-dev/apportion/pkg/registries"
)

// attestationAnnotation marks the provenance/SBOM entries BuildKit adds to an
// index next to the images (with platform unknown/unknown).
const attestationAnnotation = "vnd.docker.reference.type"

// imageError is an answer about the image (bad reference, unauthorized,
// forbidden, not found, no platform): the registry works, so it does not
// count against the registry's breaker. Its text is apportion's own (see
// redacted).
type imageError struct{ msg string }

func (e *imageError) Error() string { return e.msg }

func isImageError(err error) bool {
	if err == nil {
		return false
	}
	if ie := (*imageError)(nil); errors.As(err, &ie) {
		return true
	}
	if te := (*transport.Error)(nil); errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			return true
		}
	}
	return false
}

// lookup reads the platforms of ref from its registry, through the
// registry's breaker. ctx is the detached, RegistryTimeout-bounded one.
// personal reports that the pod's own credentials answered for the request
// (see ownKeychain), so that its answer is kept for them only.
func (i *Inspector) lookup(ctx context.Context, ref string, creds Credentials) (ps []Platform, personal bool, err error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		// The reference is the pod's own text, not the server's.
		return nil, false, &imageError{"parsing reference: " + err.Error()}
	}
	host := r.Context().RegistryStr()
	// Refused before any request: no breaker, no credentials.
	if err := i.allowed(r.Context().Registry); err != nil {
		return nil, false, err
	}
	br := i.breakers.get(ctx, host)
	// Skip the API calls of the keychain when the registry is skipped anyway.
	if open(br) {
		return nil, false, fmt.Errorf("registry %s: %w", host, ErrCircuitOpen)
	}
	kc, own := i.keychainFor(ctx, creds)
	ps, err = br.Execute(func() ([]Platform, error) {
		start := time.Now()
		defer func() { metrics.ImageRegistrySeconds.Observe(time.Since(start).Seconds()) }()
		return i.remotePlatforms(ctx, r, host, kc)
	})
	if isBreakerRejection(err) {
		return nil, false, fmt.Errorf("registry %s: %w", host, ErrCircuitOpen)
	}
	return ps, own.answered(), i.credentialHint(host, creds, err)
}

// allowed checks the registry's host against the Registries policy, on the
// port the registry is reached on (the scheme's when the reference names
// none). The transport checks each request again, redirects included.
func (i *Inspector) allowed(reg name.Registry) error {
	host, port, err := net.SplitHostPort(reg.RegistryStr())
	if err != nil {
		host, port = reg.RegistryStr(), "443"
		if reg.Scheme() == "http" {
			port = "80"
		}
	}
	if v := i.opts.Registries.Host(host, port); !v.Allowed {
		return &registries.DeniedError{Host: reg.RegistryStr(), Reason: v.Reason}
	}
	return nil
}

// remotePlatforms GETs the manifest once; an index gives its entries'
// platforms, a single image its config's (one more GET, of the config blob).
func (i *Inspector) remotePlatforms(ctx context.Context, r name.Reference, host string, kc authn.Keychain) ([]Platform, error) {
	desc, err := remote.Get(r,
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(kc),
		remote.WithTransport(i.opts.Transport),
		remote.WithUserAgent("apportion"),
		// One attempt: a failure is cached for FailureTTL and counted by the
		// breaker, and the caller is waiting on this request meanwhile.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
	)
	if err != nil {
		return nil, registryError(host, "getting the manifest", err)
	}
	switch desc.MediaType {
	case types.OCIImageIndex, types.DockerManifestList:
		idx, err := v1.ParseIndexManifest(bytes.NewReader(desc.Manifest))
		if err != nil {
			return nil, &imageError{"the index is not valid JSON"}
		}
		ps := indexPlatforms(idx)
		if len(ps) == 0 {
			return nil, &imageError{"index lists no platform"}
		}
		return ps, nil
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
		img, err := desc.Image()
		if err != nil {
			return nil, &imageError{"the image manifest is not valid"}
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, registryError(host, "getting the image config", err)
		}
		if cf.OS == "" || cf.Architecture == "" {
			return nil, &imageError{"image config names no os/architecture"}
		}
		return []Platform{platform(cf.OS, cf.Architecture, cf.Variant)}, nil
	default:
		// The media type is the server's Content-Type: named only when it
		// is one of the known ones (a Docker schema 1 manifest, an artifact).
		if knownMediaTypes[desc.MediaType] {
			return nil, &imageError{fmt.Sprintf("unsupported manifest media type %q", desc.MediaType)}
		}
		return nil, &imageError{"unsupported manifest media type"}
	}
}

// indexPlatforms are the platforms of an index's entries, sorted and
// deduplicated, without attestations and unknown entries.
func indexPlatforms(idx *v1.IndexManifest) []Platform {
	ps := make([]Platform, 0, len(idx.Manifests))
	for _, m := range idx.Manifests {
		p := m.Platform
		if p == nil || p.OS == "" || p.Architecture == "" || p.OS == "unknown" || p.Architecture == "unknown" {
			continue
		}
		if m.Annotations[attestationAnnotation] == "attestation-manifest" {
			continue
		}
		ps = append(ps, platform(p.OS, p.Architecture, p.Variant))
	}
	slices.SortFunc(ps, func(a, b Platform) int {
		switch {
		case a.less(b):
			return -1
		case b.less(a):
			return 1
		}
		return 0
	})
	return slices.Clip(slices.Compact(ps))
}

// keychainFor builds the keychain of one look-up and its part holding the
// pod's own credentials (nil when there is none): the pod's pull secrets,
// then ECR, then anonymous; or, given Options.Keychain, the caller's keychain
// alone, all of it the pod's own. A failing Kubernetes part
// (ServiceAccount forbidden, API down) falls back to ECR then anonymous and is
// logged once per namespace/ServiceAccount per hour.
func (i *Inspector) keychainFor(ctx context.Context, creds Credentials) (authn.Keychain, *ownKeychain) {
	kc, err := i.keychain(ctx, creds)
	if err == nil {
		if kc == nil {
			return authn.NewMultiKeychain(i.ecr), nil
		}
		own := &ownKeychain{Keychain: kc}
		if i.opts.Keychain != nil {
			return own, own
		}
		return authn.NewMultiKeychain(own, i.ecr), own
	}
	sa := creds.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	key := creds.Namespace + "/" + sa
	if _, found := i.warned.GetOrSet(key, struct{}{}); !found {
		log.FromContext(ctx).Info("cannot read pull credentials, using ECR and anonymous access",
			"namespace", creds.Namespace, "serviceAccount", sa, "error", err.Error())
	}
	return authn.NewMultiKeychain(i.ecr), nil
}

// platform shares the strings of the common platforms instead of keeping the
// decoder's copies in every cache entry.
func platform(os, arch, variant string) Platform {
	return Platform{OS: intern(os), Architecture: intern(arch), Variant: intern(variant)}
}

func intern(s string) string {
	switch s {
	case "":
		return ""
	case "linux":
		return "linux"
	case "windows":
		return "windows"
	case "amd64":
		return "amd64"
	case "arm64":
		return "arm64"
	case "arm":
		return "arm"
	case "386":
		return "386"
	case "ppc64le":
		return "ppc64le"
	case "s390x":
		return "s390x"
	case "riscv64":
		return "riscv64"
	case "v5":
		return "v5"
	case "v6":
		return "v6"
	case "v7":
		return "v7"
	case "v8":
		return "v8"
	}
	return s
}

// knownMediaTypes are the media types an error may quote: those
// go-containerregistry names and the common web ones (a host that is no
// registry answered).
var knownMediaTypes = map[types.MediaType]bool{
	types.OCIContentDescriptor: true, types.OCIConfigJSON: true, types.OCIEmptyJSON: true,
	types.OCILayer: true, types.OCILayerZStd: true, types.OCIRestrictedLayer: true,
	types.OCIUncompressedLayer: true, types.OCIUncompressedRestrictedLayer: true,
	types.DockerManifestSchema1: true, types.DockerManifestSchema1Signed: true,
	types.DockerLayer: true, types.DockerConfigJSON: true, types.DockerPluginConfig: true,
	types.DockerForeignLayer: true, types.DockerUncompressedLayer: true,
	"application/json": true, "text/plain": true, "text/html": true, "application/octet-stream": true,
}
