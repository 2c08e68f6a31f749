//go:build e2e

package chart_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/hack/release/releasekit"
	"github.com/apportion-dev/apportion/test/framework"
)

// e2eRelease is the version the step releases (a semver pre-release).
const e2eRelease = "v0.0.0-e2e"

// testInstallFromOCIRegistry releases apportion as a user would get it: `make
// release` (this machine's platform only, to keep the step short), `make
// release-push` with a cosign key made here to a registry inside the
// cluster's network, `cosign verify` and `cosign verify-attestation` of the
// image and both charts with the public key (the gate: nothing is installed
// unless it passes), then `helm install` of the chart from that registry
// with the chart's default tag.
// framework.Kubelet pulls the image the chart's pods name, so they run the
// binary of the pushed image: the step checks the pods' imageID against the
// digest release-push printed, the running binary against the released
// one, and what the binary says its version is. It runs after Uninstall,
// reuses the release name and namespace, and uninstalls at the end; its
// sub-test TamperedIndexRefused then replaces the image tag and checks that
// the gate refuses it.
func testInstallFromOCIRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	reg, err := framework.StartRegistry(env.c)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	env.kubelet.PullFrom(reg)
	defer env.kubelet.PullFrom(nil)
	tag := strings.TrimPrefix(e2eRelease, "v")
	dir := t.TempDir()
	vars := []string{"VERSION=" + e2eRelease, "RELEASE_DIR=" + dir}
	keys := t.TempDir()
	pub := cosignKeyPair(ctx, t, keys)

	phase := time.Now()
	out, err := runMake(ctx, exec.CommandContext(ctx, "make", append([]string{"release", "RELEASE_PLATFORMS=linux/" + runtime.GOARCH}, vars...)...))
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("make release took %s", time.Since(phase).Round(time.Millisecond))
	checkReleaseDir(t, dir, tag)

	// release-push runs inside the cluster's network namespace, where the
	// registry listens.
	phase = time.Now()
	push := env.c.Command("make", append([]string{"release-push", "REGISTRY=" + reg.Host, "INSECURE=1",
		"COSIGN_KEY=" + filepath.Join(keys, "cosign.key")}, vars...)...)
	push.Env = append(push.Env, "COSIGN_PASSWORD="+cosignPassword)
	if out, err = runMake(ctx, push); err != nil {
		t.Fatalf("make release-push: %v\n%s", err, out)
	}
	t.Logf("make release-push took %s:\n%s", time.Since(phase).Round(time.Millisecond), strings.TrimSpace(out))
	imageRepo := reg.Host + "/" + releasekit.ImageRepository
	imageDigest := printedDigest(t, out, `(?m)^image `+regexp.QuoteMeta(imageRepo+":"+tag)+`@(sha256:[0-9a-f]{64})$`)
	chartRef := "oci://" + reg.Host + "/" + releasekit.ChartRepository + "/apportion"
	chartDigest := printedDigest(t, out, `(?m)^chart `+regexp.QuoteMeta(chartRef+":"+tag)+`@(sha256:[0-9a-f]{64})$`)
	t.Logf("image digest %s, chart digest %s", imageDigest, chartDigest)
	crdRef := "oci://" + reg.Host + "/" + releasekit.ChartRepository + "/apportion-crd"
	for _, ref := range []string{imageRepo + "@" + imageDigest, strings.TrimPrefix(chartRef, "oci://") + "@" + chartDigest} {
		if !strings.Contains(out, "\nsigned "+ref+"\n") {
			t.Errorf("make release-push did not say it signed %s:\n%s", ref, out)
		}
	}

	// The gate: what the tags name now is signed with the key and carries
	// the attestations, or nothing is installed.
	phase = time.Now()
	verified, err := verifyRelease(ctx, pub, imageRepo+":"+tag, []string{chartRef + ":" + tag, crdRef + ":" + tag})
	if err != nil {
		t.Fatalf("cosign verify of the release pushed: %v", err)
	}
	if verified[imageRepo+":"+tag] != imageDigest || verified[chartRef+":"+tag] != chartDigest {
		t.Fatalf("cosign verified %v, want the image %s and the chart %s that make release-push printed", verified, imageDigest, chartDigest)
	}
	t.Logf("cosign verify and verify-attestation (%s, %s) of the image and both charts took %s",
		releasekit.SBOMAttestationType, releasekit.ProvenanceAttestationType, time.Since(phase).Round(time.Millisecond))

	// The CRD chart first, as the README installs it: here an upgrade of
	// the apportion-crd release the CRDUpgrade step made.
	phase = time.Now()
	if hout, err := helm(ctx, "upgrade", "--install", crdRelease, crdRef, "--version", tag, "--plain-http",
		"-n", namespace, "--create-namespace", "--wait", "--timeout", "2m"); err != nil {
		t.Fatalf("helm upgrade --install %s from %s: %v\n%s", crdRelease, crdRef, err, hout)
	}
	t.Logf("helm upgrade --install %s --version %s took %s", crdRef, tag, time.Since(phase).Round(time.Millisecond))

	// The chart's default image is REPOSITORY:appVersion; only the
	// repository points at the test registry.
	phase = time.Now()
	hout, err := helm(ctx, "install", release, chartRef, "--version", tag, "--plain-http",
		"-n", namespace, "--create-namespace", "-f", testdata("values.yaml"),
		"--set", "controller.image.repository="+imageRepo, "--wait", "--timeout", "4m")
	if err != nil {
		t.Fatalf("helm install from %s: %v\n%s\nkubelet:\n%s", chartRef, err, hout, logTail("kubelet", 30))
	}
	t.Logf("helm install %s --version %s took %s", chartRef, tag, time.Since(phase).Round(time.Millisecond))
	checkHelmRelease(ctx, t, tag)

	var procs []*framework.PodProcess
	waitFor(t, 2*time.Minute, "the released chart's 2 replicas running", func() error {
		procs = procs[:0]
		for _, p := range env.kubelet.Processes() {
			if p.Namespace == namespace {
				procs = append(procs, p)
			}
		}
		if len(procs) != 2 {
			return fmt.Errorf("%d running", len(procs))
		}
		return nil
	})
	wantID := imageRepo + "@" + imageDigest
	released := filepath.Join(dir, fmt.Sprintf("apportion_%s_linux_%s", tag, runtime.GOARCH))
	for _, p := range procs {
		checkPulledProcess(ctx, t, p, wantID, released, imageRepo+":"+tag)
	}

	phase = time.Now()
	if hout, err := helm(ctx, "uninstall", release, "-n", namespace, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("helm uninstall: %v\n%s\nkubelet:\n%s", err, hout, logTail("kubelet", 30))
	}
	t.Logf("helm uninstall took %s; the step took %s", time.Since(phase).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	t.Run("TamperedIndexRefused", func(t *testing.T) {
		testTamperedIndexRefused(ctx, t, reg, pub, imageRepo+":"+tag, []string{chartRef + ":" + tag, crdRef + ":" + tag})
	})
}

// testTamperedIndexRefused pushes another image index to the release's tag,
// as someone with write access to the registry could, and signs it with
// another key: the gate refuses it, and nothing is installed.
func testTamperedIndexRefused(ctx context.Context, t *testing.T, reg *framework.Registry, pub, image string, charts []string) {
	repoTag := strings.TrimPrefix(image, reg.Host+"/")
	forged, err := reg.PushIndex(ctx, repoTag, []string{"linux/amd64", "linux/arm64"}, false, framework.ImageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		verified, err := verifyRelease(ctx, pub, image, charts)
		if err == nil {
			t.Fatalf("%s: cosign verify passed (%v)", what, verified)
		}
		if !strings.Contains(err.Error(), "cosign verify "+image) {
			t.Errorf("%s: refused, but not for the image: %v", what, err)
		}
		t.Logf("%s: refused: %s", what, firstLine(err.Error()))
		rels := helmList(ctx, t)
		for _, r := range rels {
			if r.Name == release {
				t.Fatalf("%s: release %s installed although cosign verify failed: %+v", what, release, r)
			}
		}
	}
	check("an unsigned index " + forged.String() + " pushed to " + image)

	// The forger signs it with a key of their own.
	other := t.TempDir()
	cosignKeyPair(ctx, t, other)
	sign := env.c.Command("cosign", "sign", "--key", filepath.Join(other, "cosign.key"), "--tlog-upload=false", "--yes",
		"--allow-http-registry", reg.Host+"/"+releasekit.ImageRepository+"@"+forged.String())
	sign.Env = append(sign.Env, "COSIGN_PASSWORD="+cosignPassword)
	if out, err := framework.Run(ctx, sign); err != nil {
		t.Fatalf("cosign sign with another key: %v\n%s", err, out)
	}
	check("the index " + forged.String() + " signed with another key")
}

// cosignPassword encrypts the test's cosign keys.
const cosignPassword = "e2e-cosign-password"

// cosignKeyPair makes dir/cosign.key and dir/cosign.pub and returns the
// public key's path.
func cosignKeyPair(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	cmd := env.c.Command("cosign", "generate-key-pair")
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, "COSIGN_PASSWORD="+cosignPassword)
	if out, err := framework.Run(ctx, cmd); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	return filepath.Join(dir, "cosign.pub")
}

// verifyRelease runs, as docs/verifying-releases.md tells users to, `cosign
// verify` on the image and each chart and `cosign verify-attestation` for
// the image's SBOM and provenance and each chart's provenance, all with the
// public key pub and without a transparency log. It returns the digest each
// reference was verified at.
func verifyRelease(ctx context.Context, pub, image string, charts []string) (map[string]string, error) {
	verified := map[string]string{}
	run := func(ref, sub string, flags ...string) error {
		// cosign takes OCI references without the scheme helm uses.
		args := append(append([]string{sub, "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry"}, flags...), strings.TrimPrefix(ref, "oci://"))
		what := strings.TrimSpace("cosign " + sub + " " + ref + " " + strings.Join(flags, " "))
		cmd := env.c.Command("cosign", args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
		err := cmd.Wait()
		stop()
		if err != nil {
			return fmt.Errorf("%s: %w\n%s", what, err, stderr.String())
		}
		d, err := verifiedDigest(stdout.Bytes())
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if prev, ok := verified[ref]; ok && prev != d {
			return fmt.Errorf("%s verified at %s, then at %s", ref, prev, d)
		}
		verified[ref] = d
		return nil
	}
	steps := [][]string{
		{image, "verify"},
		{image, "verify-attestation", "--type", releasekit.SBOMAttestationType},
		{image, "verify-attestation", "--type", releasekit.ProvenanceAttestationType},
	}
	for _, c := range charts {
		steps = append(steps, []string{c, "verify"}, []string{c, "verify-attestation", "--type", releasekit.ProvenanceAttestationType})
	}
	for _, s := range steps {
		if err := run(s[0], s[1], s[2:]...); err != nil {
			return verified, err
		}
	}
	return verified, nil
}

// runMake runs a make command in the repository and returns its output.
func runMake(ctx context.Context, cmd *exec.Cmd) (string, error) {
	cmd.Dir = framework.RepoRoot()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "GOTOOLCHAIN=auto")
	return framework.Run(ctx, cmd)
}

func printedDigest(t *testing.T, out, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("make release-push printed no line matching %s:\n%s", pattern, out)
	}
	return m[1]
}

// checkReleaseDir checks what make release wrote: SHA256SUMS over every
// artifact, and the binary's SBOM naming the release and the Karpenter
// module.
func checkReleaseDir(t *testing.T, dir, tag string) {
	t.Helper()
	n, err := releasekit.VerifySums(dir)
	if err != nil {
		t.Fatalf("SHA256SUMS: %v", err)
	}
	// Binary, SBOM, image archive, chart.
	if n < 4 {
		t.Errorf("SHA256SUMS lists %d files, want the binary, its SBOM, the image archive and the chart", n)
	}
	sbomPath := filepath.Join(dir, fmt.Sprintf("apportion_%s_linux_%s.cdx.json", tag, runtime.GOARCH))
	b, err := os.ReadFile(sbomPath)
	if err != nil {
		t.Fatal(err)
	}
	var sbom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct {
				Name, Version string
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			PURL string `json:"purl"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &sbom); err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	var karpenter bool
	for _, c := range sbom.Components {
		karpenter = karpenter || strings.HasPrefix(c.PURL, "pkg:golang/sigs.k8s.io/karpenter@v")
	}
	if sbom.BOMFormat != "CycloneDX" || sbom.Metadata.Component.Version != e2eRelease || !karpenter {
		t.Errorf("SBOM: format %q, component %+v, Karpenter listed %v", sbom.BOMFormat, sbom.Metadata.Component, karpenter)
	}
	t.Logf("SBOM %s: %d bytes, %d components", filepath.Base(sbomPath), len(b), len(sbom.Components))
}

// checkHelmRelease checks that the installed chart is the release's:
// version and appVersion without the v.
func checkHelmRelease(ctx context.Context, t *testing.T, tag string) {
	t.Helper()
	rels := helmList(ctx, t)
	// The release and the CRD release, both from the registry's charts.
	want := map[string]string{release: "apportion-" + tag, crdRelease: "apportion-crd-" + tag}
	got := map[string]string{}
	for _, r := range rels {
		if r.AppVersion != tag {
			t.Errorf("helm list: release %s has app version %s, want %s", r.Name, r.AppVersion, tag)
		}
		got[r.Name] = r.Chart
	}
	if !maps.Equal(got, want) {
		t.Errorf("helm list: %+v, want charts %v", rels, want)
	}
}

// checkPulledProcess checks that pod process p runs the binary of the
// pushed image: its pod's image is the chart's default (tag = appVersion),
// the status reports the pushed digest, the binary is byte for byte the
// released one and says it is the release.
func checkPulledProcess(ctx context.Context, t *testing.T, p *framework.PodProcess, wantID, released, wantImage string) {
	t.Helper()
	var pod corev1.Pod
	if err := env.kube.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, &pod); err != nil {
		t.Fatal(err)
	}
	if got := pod.Spec.Containers[0].Image; got != wantImage {
		t.Errorf("pod %s: image %s, want the chart's default %s", p.Name, got, wantImage)
	}
	if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].ImageID != wantID {
		t.Errorf("pod %s: container statuses %+v, want imageID %s", p.Name, pod.Status.ContainerStatuses, wantID)
	}
	if p.ImageID != wantID {
		t.Errorf("pod %s: the kubelet pulled %s, want %s", p.Name, p.ImageID, wantID)
	}
	if p.Binary == env.bin {
		t.Fatalf("pod %s runs the test's own binary, not the image's", p.Name)
	}
	if got, want := sha256File(t, p.Binary), sha256File(t, released); got != want {
		t.Errorf("pod %s runs %s (sha256 %s), want the released binary %s (sha256 %s)", p.Name, p.Binary, got, released, want)
	}
	out, err := exec.CommandContext(ctx, p.Binary, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "apportion "+e2eRelease+" ") || !strings.Contains(string(out), "linux/"+runtime.GOARCH) {
		t.Errorf("pod %s: `apportion version` of its binary: %v: %s", p.Name, err, out)
	}
	t.Logf("pod %s: imageID %s, `apportion version`: %s", p.Name, p.ImageID, strings.TrimSpace(string(out)))
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// verifiedDigest reads the digest cosign verified from its output: `cosign
// verify` prints the signed payloads (JSON), `cosign verify-attestation`
// one DSSE envelope a line whose in-toto statement names the subject.
func verifiedDigest(out []byte) (string, error) {
	var sigs []struct {
		Critical struct {
			Image struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
		} `json:"critical"`
	}
	if json.Unmarshal(out, &sigs) == nil && len(sigs) > 0 && sigs[0].Critical.Image.Digest != "" {
		return sigs[0].Critical.Image.Digest, nil
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	var env struct {
		Payload []byte `json:"payload"`
	}
	var st struct {
		Subject []struct {
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
	}
	if err := json.Unmarshal([]byte(line), &env); err != nil {
		return "", fmt.Errorf("reading its output: %w\n%s", err, out)
	}
	if err := json.Unmarshal(env.Payload, &st); err != nil || len(st.Subject) == 0 || st.Subject[0].Digest["sha256"] == "" {
		return "", fmt.Errorf("no subject in the attestation %s", env.Payload)
	}
	return "sha256:" + st.Subject[0].Digest["sha256"], nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
