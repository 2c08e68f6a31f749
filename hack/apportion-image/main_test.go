package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/elf"
	"encoding/binary"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apportion-dev/apportion/hack/apportion-image/ociimage"
)

// fakeELF writes the smallest static ELF64 executable header debug/elf
// reads, for machine m, plus a few bytes of "code" (tag) so that binaries
// differ.
func fakeELF(t *testing.T, m elf.Machine, tag string) string {
	t.Helper()
	const hdr, phsize = 64, 56
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(m), Version: uint32(elf.EV_CURRENT),
		Phoff: hdr, Ehsize: hdr, Phentsize: phsize, Phnum: 1, Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	if err := binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Align: 0x1000}); err != nil {
		t.Fatal(err)
	}
	b.WriteString(tag)
	path := filepath.Join(t.TempDir(), "apportion")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func caBundle(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func runCmd(args []string, env map[string]string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr, func(k string) string { return env[k] })
	return code, stdout.String(), stderr.String()
}

var lineRE = regexp.MustCompile(`^(linux/\S+)\s+sha256:[0-9a-f]{64}\s+[0-9]+\.[0-9]{2} MB  user 65532:65532  entrypoint \["/apportion","webhook"\]$`)

func TestRunWritesChecksAndPrints(t *testing.T) {
	amd := fakeELF(t, elf.EM_X86_64, "amd64 code")
	arm := fakeELF(t, elf.EM_AARCH64, "arm64 code")
	ca := caBundle(t)
	dir := t.TempDir()
	out, tarball := filepath.Join(dir, "image"), filepath.Join(dir, "image.tar")
	args := []string{"--amd64", amd, "--arm64", arm, "--version", "v1.2.3", "--revision", "abc123",
		"--ca-bundle", ca, "--out", out, "--tarball", tarball}
	code, stdout, stderr := runCmd(args, map[string]string{"SOURCE_DATE_EPOCH": "1714564800"})
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if stderr != "" {
		t.Errorf("stderr: %s", stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines, got:\n%s", stdout)
	}
	if !strings.HasPrefix(lines[0], "wrote "+out+": OCI image layout, index sha256:") || !strings.Contains(lines[0], "ref v1.2.3, CA bundle from "+ca) {
		t.Errorf("first line: %s", lines[0])
	}
	for i, want := range []string{"linux/amd64", "linux/arm64/v8"} {
		m := lineRE.FindStringSubmatch(lines[i+1])
		if m == nil || m[1] != want {
			t.Errorf("line %d = %q, want the %s line", i+1, lines[i+1], want)
		}
	}
	if !strings.HasPrefix(lines[3], "wrote "+tarball+": OCI archive of "+out) {
		t.Errorf("last line: %s", lines[3])
	}

	// What it wrote is what it says, with the epoch from the environment.
	d, err := ociimage.Describe(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, pi := range d.Platforms {
		if !pi.Config.Created.Time.Equal(time.Unix(1714564800, 0)) {
			t.Errorf("%s: created %s", pi.Platform, pi.Config.Created.Time)
		}
		if pi.Config.Config.Labels[ociimage.LabelRevision] != "abc123" || pi.Config.Config.Labels[ociimage.LabelSource] != ociimage.DefaultSource {
			t.Errorf("%s: labels %v", pi.Platform, pi.Config.Config.Labels)
		}
		if _, ok := pi.File(ociimage.CABundlePath); !ok {
			t.Errorf("%s: no CA bundle", pi.Platform)
		}
	}
	if _, err := os.Stat(tarball); err != nil {
		t.Error(err)
	}

	// Again, with the flag instead of the environment and --binary: the
	// same digests (reproducible), replacing the layout.
	args2 := []string{"--binary", "linux/arm64=" + arm, "--binary", "linux/amd64=" + amd, "--version", "v1.2.3", "--revision", "abc123",
		"--ca-bundle", ca, "--out", out, "--source-date-epoch", "1714564800"}
	code, stdout2, stderr := runCmd(args2, nil)
	if code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	if got, want := strings.Split(stdout2, "\n")[:3], lines[:3]; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("second run printed\n%s\nfirst\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestRunCABundleDefault(t *testing.T) {
	amd := fakeELF(t, elf.EM_X86_64, "amd64 code")
	base := []string{"--amd64", amd, "--version", "v1", "--revision", "r"}
	saved := defaultCABundle
	t.Cleanup(func() { defaultCABundle = saved })

	// The default bundle is copied when present...
	defaultCABundle = caBundle(t)
	out := filepath.Join(t.TempDir(), "image")
	code, stdout, stderr := runCmd(append(base, "--out", out), nil)
	if code != 0 || !strings.Contains(stdout, "CA bundle from "+defaultCABundle) {
		t.Errorf("default present: exit %d\n%s%s", code, stdout, stderr)
	}
	// ...a warning when absent...
	defaultCABundle = filepath.Join(t.TempDir(), "absent.crt")
	out = filepath.Join(t.TempDir(), "image")
	code, stdout, stderr = runCmd(append(base, "--out", out), nil)
	if code != 0 || !strings.Contains(stdout, "no CA bundle") || !strings.Contains(stderr, "warning: no CA bundle at "+defaultCABundle) {
		t.Errorf("default absent: exit %d\n%s%s", code, stdout, stderr)
	}
	// ...none and no warning with --ca-bundle "".
	out = filepath.Join(t.TempDir(), "image")
	code, stdout, stderr = runCmd(append(base, "--out", out, "--ca-bundle", ""), nil)
	if code != 0 || !strings.Contains(stdout, "no CA bundle") || stderr != "" {
		t.Errorf("--ca-bundle '': exit %d\n%s%s", code, stdout, stderr)
	}
	d, err := ociimage.Describe(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Platforms[0].File(ociimage.CABundlePath); ok {
		t.Error("a CA bundle with --ca-bundle ''")
	}
}

func TestRunUsage(t *testing.T) {
	amd := fakeELF(t, elf.EM_X86_64, "x")
	out := filepath.Join(t.TempDir(), "image")
	ok := []string{"--amd64", amd, "--version", "v1", "--revision", "r", "--out", out}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no flags", nil, nil, "no binary"},
		{"unknown flag", append([]string{"--arch", "amd64"}, ok...), nil, "flag provided but not defined: -arch"},
		{"no version", []string{"--amd64", amd, "--revision", "r", "--out", out}, nil, "--version is required"},
		{"no revision", []string{"--amd64", amd, "--version", "v1", "--out", out}, nil, "--revision is required"},
		{"no out", []string{"--amd64", amd, "--version", "v1", "--revision", "r"}, nil, "--out is required"},
		{"empty source", append(ok, "--source", ""), nil, "--source is required"},
		{"binary without =", append(ok, "--binary", "linux/arm64"), nil, "want PLATFORM=PATH"},
		{"bad platform", append(ok, "--binary", "windows/amd64="+amd), nil, "the OS must be linux"},
		{"unknown architecture", append(ok, "--binary", "linux/x86_64="+amd), nil, "unknown architecture"},
		{"two for amd64", append(ok, "--binary", "linux/amd64="+amd), nil, "two binaries for linux/amd64"},
		{"empty path", append(ok, "--arm64", ""), nil, "empty binary path for linux/arm64"},
		{"tarball inside the layout", append(ok, "--tarball", filepath.Join(out, "image.tar")), nil, "is inside --out"},
		{"extra argument", append(ok, "webhook"), nil, `unexpected argument "webhook"`},
		{"bad epoch flag", append(ok, "--source-date-epoch", "yesterday"), nil, "--source-date-epoch"},
		{"bad epoch env", ok, map[string]string{"SOURCE_DATE_EPOCH": "-5"}, "SOURCE_DATE_EPOCH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(tc.args, tc.env)
			if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "apportion-image -h") || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tc.want)
			}
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a usage error wrote the layout")
	}
	for _, h := range []string{"-h", "--help"} {
		code, stdout, stderr := runCmd([]string{h}, nil)
		if code != 0 || !strings.HasPrefix(stdout, "Usage: apportion-image") || stderr != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", h, code, stdout, stderr)
		}
	}
}

func TestRunFailures(t *testing.T) {
	amd := fakeELF(t, elf.EM_X86_64, "amd64 code")
	arm := fakeELF(t, elf.EM_AARCH64, "arm64 code")
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("nothing"), 0o644); err != nil {
		t.Fatal(err)
	}
	occupied := t.TempDir()
	if err := os.WriteFile(filepath.Join(occupied, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image")
	meta := []string{"--version", "v1", "--revision", "r", "--ca-bundle", ""}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"swapped binaries", []string{"--amd64", arm, "--arm64", amd, "--out", out}, "is a EM_AARCH64 binary, not linux/amd64"},
		{"not an ELF", []string{"--amd64", notELF, "--out", out}, "is not an ELF executable"},
		{"missing binary", []string{"--amd64", filepath.Join(t.TempDir(), "nope"), "--out", out}, "no such file"},
		{"missing CA bundle", []string{"--amd64", amd, "--out", out, "--ca-bundle", filepath.Join(t.TempDir(), "nope.crt")}, "--ca-bundle"},
		{"CA bundle not PEM", []string{"--amd64", amd, "--out", out, "--ca-bundle", notPEM}, "no PEM certificate"},
		{"out is not a layout", []string{"--amd64", amd, "--out", occupied}, "not an OCI image layout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCmd(append(slices.Clone(meta), tc.args...), nil)
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(occupied, "notes.txt")); err != nil || string(b) != "mine" {
		t.Errorf("notes.txt = %q, %v", b, err)
	}
}
