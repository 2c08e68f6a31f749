package releasekit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// SignOptions say how Push signs what it pushed. cosign signs with a key
// (a file, or a KMS URI) and uploads nothing to a transparency log: the
// release can be pushed and verified offline. Keyless signing needs an OIDC
// identity, which a CI has; docs/verifying-releases.md shows how.
type SignOptions struct {
	// Key is the cosign private key (cosign.key, or a KMS URI); cosign
	// reads its password from COSIGN_PASSWORD.
	Key string
	// Revision is the git commit the release was built from.
	Revision string
	// SourceDateEpoch is the release's time (the commit's): the
	// provenance carries it, not the time of the push.
	SourceDateEpoch time.Time
	// BuilderID names who built the release (default DefaultBuilderID).
	BuilderID string
	// Cosign runs cosign with args; nil runs "cosign" from PATH.
	Cosign func(ctx context.Context, args ...string) ([]byte, error)
	// Keyless signs without a key, with the OIDC identity of the CI that
	// runs cosign (keyless.go); Key must then be empty.
	Keyless bool
}

// DefaultBuilderID is the provenance's builder when SignOptions.BuilderID
// is empty: the Makefile's release targets.
const DefaultBuilderID = "https://github.com/apportion-dev/apportion/blob/main/Makefile#release"

// BuildType is the provenance's buildType: `make release`.
const BuildType = "https://github.com/apportion-dev/apportion/blob/main/CONTRIBUTING.md#releasing"

// The attestation types Push attaches, as `cosign attest --type` and
// `cosign verify-attestation --type` name them.
const (
	SBOMAttestationType       = "cyclonedx"
	ProvenanceAttestationType = "slsaprovenance1"
	// ProvenancePredicateType is what slsaprovenance1 stands for.
	ProvenancePredicateType = "https://slsa.dev/provenance/v1"
)

// ErrUnsigned is Push's answer when it has neither a key nor leave to push
// unsigned.
var ErrUnsigned = errors.New("refusing to push an unsigned release: give a cosign key " +
	"(make release-push COSIGN_KEY=cosign.key, its password in COSIGN_PASSWORD; `cosign generate-key-pair` makes one), " +
	"sign keyless with a CI's OIDC identity (KEYLESS=1), " +
	"or say UNSIGNED=1 to push without signatures and attestations")

// CosignCommand returns a SignOptions.Cosign that runs the cosign binary
// at path with this process's environment (COSIGN_PASSWORD).
func CosignCommand(path string) func(ctx context.Context, args ...string) ([]byte, error) {
	return func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Env = os.Environ()
		return cmd.CombinedOutput()
	}
}

// Subject is one artifact a provenance statement is about.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Statement is an in-toto v1 statement.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

type resourceDescriptor struct {
	Name   string            `json:"name,omitempty"`
	URI    string            `json:"uri,omitempty"`
	Digest map[string]string `json:"digest"`
}

// provenance is an SLSA v1 provenance predicate, the fields apportion fills.
type provenance struct {
	BuildDefinition struct {
		BuildType            string               `json:"buildType"`
		ExternalParameters   map[string]string    `json:"externalParameters"`
		InternalParameters   map[string]int64     `json:"internalParameters"`
		ResolvedDependencies []resourceDescriptor `json:"resolvedDependencies"`
	} `json:"buildDefinition"`
	RunDetails struct {
		Builder struct {
			ID string `json:"id"`
		} `json:"builder"`
		Metadata struct {
			StartedOn  string `json:"startedOn"`
			FinishedOn string `json:"finishedOn"`
		} `json:"metadata"`
		Byproducts []resourceDescriptor `json:"byproducts"`
	} `json:"runDetails"`
}

// ProvenanceStatement returns the SLSA v1 provenance of the release in dir
// about subjects: the version, the git revision, the builder, the
// release's time and every file SHA256SUMS lists. Nothing in it depends on
// when or where it is made, so a release gives the same statement every
// time. cosign attest wraps the predicate in a statement of its own whose
// subject is the artifact it attests.
func ProvenanceStatement(dir, version string, o SignOptions, subjects []Subject) (*Statement, error) {
	if _, err := ParseVersion(version); err != nil {
		return nil, err
	}
	if o.Revision == "" {
		return nil, errors.New("provenance: no git revision")
	}
	files, err := readSums(dir)
	if err != nil {
		return nil, fmt.Errorf("provenance: %w (run make release first)", err)
	}
	var p provenance
	p.BuildDefinition.BuildType = BuildType
	p.BuildDefinition.ExternalParameters = map[string]string{
		"version": version,
		"source":  "git+https://github.com/apportion-dev/apportion@refs/tags/" + version,
	}
	p.BuildDefinition.InternalParameters = map[string]int64{"SOURCE_DATE_EPOCH": o.SourceDateEpoch.Unix()}
	p.BuildDefinition.ResolvedDependencies = []resourceDescriptor{{
		URI:    "git+https://github.com/apportion-dev/apportion@refs/tags/" + version,
		Digest: map[string]string{"gitCommit": o.Revision},
	}}
	p.RunDetails.Builder.ID = o.BuilderID
	if p.RunDetails.Builder.ID == "" {
		p.RunDetails.Builder.ID = DefaultBuilderID
	}
	at := o.SourceDateEpoch.UTC().Format(time.RFC3339)
	p.RunDetails.Metadata.StartedOn, p.RunDetails.Metadata.FinishedOn = at, at
	for _, f := range files {
		p.RunDetails.Byproducts = append(p.RunDetails.Byproducts,
			resourceDescriptor{Name: f.name, Digest: map[string]string{"sha256": f.sum}})
	}
	pred, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	subjects = append([]Subject(nil), subjects...)
	sort.Slice(subjects, func(i, j int) bool { return subjects[i].Name < subjects[j].Name })
	return &Statement{
		Type: "https://in-toto.io/Statement/v1", Subject: subjects,
		PredicateType: ProvenancePredicateType, Predicate: pred,
	}, nil
}

type summedFile struct{ name, sum string }

// readSums reads dir/SHA256SUMS, sorted by name.
func readSums(dir string) ([]summedFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, SumsFile))
	if err != nil {
		return nil, err
	}
	var out []summedFile
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			return nil, fmt.Errorf("%s: bad line %q", SumsFile, sc.Text())
		}
		out = append(out, summedFile{name: name, sum: sum})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, sc.Err()
}

// imageSBOMs are the SBOMs of the image's binaries that make release
// wrote: apportion_TAG_linux_ARCH.cdx.json.
func imageSBOMs(dir, tag string) ([]string, error) {
	sboms, err := filepath.Glob(filepath.Join(dir, "apportion_"+tag+"_linux_*.cdx.json"))
	if err != nil {
		return nil, err
	}
	if len(sboms) == 0 {
		return nil, fmt.Errorf("no SBOM apportion_%s_linux_*.cdx.json in %s (run make release first)", tag, dir)
	}
	sort.Strings(sboms)
	return sboms, nil
}

// checkSigning refuses a push that would not be signed (unless
// o.Unsigned) or whose attestations could not be made.
func checkSigning(o PushOptions, tag string) error {
	switch {
	case o.Sign == nil && o.Unsigned:
		return nil
	case o.Sign == nil || (o.Sign.Key == "" && !o.Sign.Keyless):
		return ErrUnsigned
	case o.Unsigned:
		return errors.New("a cosign key and UNSIGNED: choose one")
	}
	if err := checkKeyless(*o.Sign); err != nil {
		return err
	}
	if _, err := imageSBOMs(o.Dir, tag); err != nil {
		return err
	}
	_, err := ProvenanceStatement(o.Dir, o.Version, *o.Sign, nil)
	return err
}

// sign signs what Push pushed, by digest, and attaches the attestations:
// the image's SBOMs and the provenance to the image index, the provenance
// to each chart. Without o.Sign (UNSIGNED) it does nothing.
func sign(ctx context.Context, o PushOptions, tag string, p *Pushed) error {
	s := o.Sign
	if s == nil {
		return nil
	}
	run := s.Cosign
	if run == nil {
		run = CosignCommand("cosign")
	}
	common := signArgs(*s)
	if o.Insecure {
		common = append(common, "--allow-http-registry")
	}
	cosign := func(args ...string) error {
		out, err := run(ctx, args...)
		if err != nil {
			// The key path is no secret; the password never is an argument.
			return fmt.Errorf("cosign %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	image := strings.TrimSuffix(p.Image, ":"+tag) + "@" + p.ImageDigest.String()
	subjects := []Subject{{Name: image, Digest: map[string]string{"sha256": p.ImageDigest.Hex}}}
	refs := []string{image}
	for _, c := range p.Charts {
		ref := strings.TrimPrefix(c.Ref, "oci://") + "@" + c.Digest
		hex, _ := strings.CutPrefix(c.Digest, "sha256:")
		subjects = append(subjects, Subject{Name: ref, Digest: map[string]string{"sha256": hex}})
		refs = append(refs, ref)
	}
	sboms, err := imageSBOMs(o.Dir, tag)
	if err != nil {
		return err
	}
	st, err := ProvenanceStatement(o.Dir, o.Version, *s, subjects)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "apportion-provenance-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	predicate := filepath.Join(tmp, "provenance.json")
	if err := os.WriteFile(predicate, st.Predicate, 0o600); err != nil {
		return err
	}

	// The index and, with --recursive, each platform's image: a policy
	// that checks the digest a node pulls finds a signature either way.
	if err := cosign(append(append([]string{"sign"}, common...), "--recursive", image)...); err != nil {
		return err
	}
	for _, sb := range sboms {
		if err := cosign(append(append([]string{"attest"}, common...),
			"--type", SBOMAttestationType, "--predicate", sb, image)...); err != nil {
			return err
		}
	}
	for i, ref := range refs {
		if i > 0 {
			if err := cosign(append(append([]string{"sign"}, common...), ref)...); err != nil {
				return err
			}
		}
		if err := cosign(append(append([]string{"attest"}, common...),
			"--type", ProvenanceAttestationType, "--predicate", predicate, ref)...); err != nil {
			return err
		}
	}
	p.Signed = refs
	return nil
}
