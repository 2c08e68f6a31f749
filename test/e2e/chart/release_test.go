//go:build e2e

package chart_test

import (
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
// release-push` to a registry inside the cluster's network, then `helm
// install` of the chart from that registry with the chart's default tag.
// framework.Kubelet pulls the image the chart's pods name, so they run the
// binary of the pushed image: the step checks the pods' imageID against the
// digest release-push printed, the running binary against the released
// one, and what the binary says its version is. It runs after Uninstall,
// reuses the release name and namespace, and uninstalls at the end.
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
	push := env.c.Command("make", append([]string{"release-push", "REGISTRY=" + reg.Host, "INSECURE=1"}, vars...)...)
	if out, err = runMake(ctx, push); err != nil {
		t.Fatalf("make release-push: %v\n%s", err, out)
	}
	t.Logf("make release-push took %s:\n%s", time.Since(phase).Round(time.Millisecond), strings.TrimSpace(out))
	imageRepo := reg.Host + "/" + releasekit.ImageRepository
	imageDigest := printedDigest(t, out, `(?m)^image `+regexp.QuoteMeta(imageRepo+":"+tag)+`@(sha256:[0-9a-f]{64})$`)
	chartRef := "oci://" + reg.Host + "/" + releasekit.ChartRepository + "/apportion"
	chartDigest := printedDigest(t, out, `(?m)^chart `+regexp.QuoteMeta(chartRef+":"+tag)+`@(sha256:[0-9a-f]{64})$`)
	t.Logf("image digest %s, chart digest %s", imageDigest, chartDigest)

	// The CRD chart first, as the README installs it: here an upgrade of
	// the apportion-crd release the CRDUpgrade step made.
	phase = time.Now()
	crdRef := "oci://" + reg.Host + "/" + releasekit.ChartRepository + "/apportion-crd"
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
