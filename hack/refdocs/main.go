// Command refdocs writes the reference pages of docs/reference from the code:
// metrics.md from the collectors pkg/metrics registers, crds.md from the
// CRDs controller-gen writes into chart/crds from the Go types of pkg/apis,
// and dashboard.md from the Grafana dashboard the chart ships
// (chart/files/apportion-dashboard.json). `make generate` runs it after
// controller-gen, and `make verify` fails when a page it writes differs from
// the one committed. Every page of docs/reference is written here: one the
// code no longer gives is removed. It is a build tool, not part of the
// product.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Paths relative to the repository's root.
const (
	outDir        = "docs/reference"
	crdDir        = "chart/crds"
	dashboardFile = "chart/files/apportion-dashboard.json"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "refdocs:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	pages, err := render(root)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, outDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, text := range pages {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	// A page the code no longer gives goes.
	old, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, ok := pages[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// render returns every page, by file name in docs/reference.
func render(root string) (map[string]string, error) {
	ms, err := registeredMetrics()
	if err != nil {
		return nil, err
	}
	crds, err := readCRDs(filepath.Join(root, crdDir))
	if err != nil {
		return nil, err
	}
	crdPage, err := crdsPage(crds)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		return nil, err
	}
	dashPage, err := dashboardPage(raw, ms)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dashboardFile, err)
	}
	return map[string]string{
		"metrics.md":   metricsPage(ms),
		"crds.md":      crdPage,
		"dashboard.md": dashPage,
	}, nil
}

// header starts every page: where it comes from, and the way back to the
// documentation's index.
func header(title, source string) string {
	return "<!-- Written by `make generate` (hack/refdocs) from " + source + ": do not edit. -->\n\n" +
		"# " + title + "\n\n[← Documentation](../README.md)\n\n"
}

// cell makes text fit in one cell of a Markdown table: one line, no bare
// pipe, no HTML.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

// code formats s as inline code.
func code(s string) string {
	return "`" + s + "`"
}
