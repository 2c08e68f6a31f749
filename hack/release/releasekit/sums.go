package releasekit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// SumsFile is the name of the checksum file in a release folder.
const SumsFile = "SHA256SUMS"

// WriteSums writes dir/SHA256SUMS over every regular file directly in dir
// (not in its sub-folders, not itself), sorted by name, in the format
// `sha256sum -c` reads.
func WriteSums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != SumsFile {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		sum, err := fileSHA256(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return os.WriteFile(filepath.Join(dir, SumsFile), []byte(b.String()), 0o644)
}

// VerifySums checks every line of dir/SHA256SUMS against the files and
// returns how many it checked.
func VerifySums(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, SumsFile))
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		sum, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
		if !ok || strings.Contains(name, "/") {
			return n, fmt.Errorf("%s: bad line %q", SumsFile, line)
		}
		got, err := fileSHA256(filepath.Join(dir, name))
		if err != nil {
			return n, err
		}
		if got != sum {
			return n, fmt.Errorf("%s: sha256 %s, %s says %s", name, got, SumsFile, sum)
		}
		n++
	}
	return n, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
