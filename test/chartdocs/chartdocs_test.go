//go:build chart

package chartdocs

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var printTable = flag.Bool("print-table", false, "print the values table of chart/README.md generated from values.yaml and values.schema.json")

// The chart's own page holds the values table, in this section.
const (
	valuesDoc     = "chart/README.md"
	valuesSection = "## Values"
)

// rbacDoc is the page with the tables of the permissions the chart grants:
// its ServiceAccount's (rbac_test.go) and those aggregated to users
// (userroles_test.go).
const rbacDoc = "docs/security.md"

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func read(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// schemaNode is the part of a JSON schema these tests look at.
type schemaNode struct {
	Type        any                    `json:"type"`
	Description string                 `json:"description"`
	Properties  map[string]*schemaNode `json:"properties"`
	// Deprecated marks a key the chart still accepts from older values
	// files but no longer sets in values.yaml.
	Deprecated bool `json:"deprecated"`
}

func loadValues(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal(read(t, "chart/values.yaml"), &v); err != nil {
		t.Fatalf("chart/values.yaml: %v", err)
	}
	return v
}

func loadSchema(t *testing.T) *schemaNode {
	t.Helper()
	var s schemaNode
	dec := json.NewDecoder(bytes.NewReader(read(t, "chart/values.schema.json")))
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("chart/values.schema.json: %v", err)
	}
	return &s
}

// valueKey is one dotted key of values.yaml with its default.
type valueKey struct {
	path string
	// structured: a map of the chart's own keys (the schema lists its
	// properties), documented key by key; its own default is not shown.
	structured bool
	// deprecated is true when only the schema has the key (see documentedKeys); it
	// has no default to show.
	deprecated bool
	value      any
}

// valueKeys lists the dotted keys of values.yaml: every key, at every level.
// A list is a leaf. A map is descended into unless the schema declares it
// free-form (an object without properties, such as nodeSelector or
// resources, whose keys are the user's, not the chart's); a map the schema
// does not know at all is descended into, so that each unknown key is
// reported.
func valueKeys(values map[string]any, schema *schemaNode) []valueKey {
	var out []valueKey
	var walk func(prefix string, m map[string]any, s *schemaNode)
	walk = func(prefix string, m map[string]any, s *schemaNode) {
		for k, v := range m {
			path := prefix + k
			var child *schemaNode
			if s != nil {
				child = s.Properties[k]
			}
			sub, isMap := v.(map[string]any)
			descend := isMap && (child == nil || child.Properties != nil)
			out = append(out, valueKey{path: path, structured: descend, value: v})
			if descend {
				walk(path+".", sub, child)
			}
		}
	}
	walk("", values, schema)
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// documentedKeys is valueKeys plus the deprecated keys the schema still
// accepts but values.yaml no longer has: the values table lists them too, so that
// whoever has one in an old values file finds what replaced it.
func documentedKeys(values map[string]any, schema *schemaNode) []valueKey {
	out := valueKeys(values, schema)
	inValues := map[string]bool{}
	for _, k := range out {
		inValues[k.path] = true
	}
	for path, n := range schemaKeys(schema) {
		if n != nil && n.Deprecated && !inValues[path] {
			out = append(out, valueKey{path: path, deprecated: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// schemaKeys lists the dotted property paths of the schema, with their nodes.
func schemaKeys(s *schemaNode) map[string]*schemaNode {
	out := map[string]*schemaNode{}
	var walk func(prefix string, s *schemaNode)
	walk = func(prefix string, s *schemaNode) {
		for k, child := range s.Properties {
			out[prefix+k] = child
			if child != nil && child.Properties != nil {
				walk(prefix+k+".", child)
			}
		}
	}
	walk("", s)
	return out
}

// tableRow is one row of the values table.
type tableRow struct {
	key, def, desc string
	line           int
}

// valuesTable parses the values table of valuesSection in valuesDoc: a
// markdown table whose header's first cell is "key" and whose rows start
// with the dotted key in backticks.
func valuesTable(t *testing.T) []tableRow {
	t.Helper()
	lines := strings.Split(string(read(t, valuesDoc)), "\n")
	start := slices.Index(lines, valuesSection)
	if start < 0 {
		t.Fatalf("%s has no %q section", valuesDoc, valuesSection)
	}
	var rows []tableRow
	inTable := false
	for i := start + 1; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, "## ") {
			break
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		cells := splitRow(line)
		if !inTable {
			if len(cells) >= 3 && strings.EqualFold(cells[0], "key") {
				inTable = true
				i++ // the |---| separator
			}
			continue
		}
		if len(cells) < 3 {
			t.Errorf("%s:%d: a values table row needs 3 cells: %s", valuesDoc, i+1, line)
			continue
		}
		key := cells[0]
		if len(key) < 2 || key[0] != '`' || key[len(key)-1] != '`' {
			t.Errorf("%s:%d: the first cell must be the dotted key in backticks, got %s", valuesDoc, i+1, key)
			continue
		}
		rows = append(rows, tableRow{key: strings.Trim(key, "`"), def: cells[1], desc: cells[2], line: i + 1})
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no values table (| key | default | description |) in %q", valuesDoc, valuesSection)
	}
	return rows
}

// splitRow splits a markdown table row on unescaped pipes.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// defaultCell is how the table shows a default: compact JSON in backticks,
// nothing for a structured map (its keys have their own rows) or a
// deprecated key (values.yaml has none).
func defaultCell(k valueKey) string {
	if k.structured || k.deprecated {
		return ""
	}
	b, err := json.Marshal(k.value)
	if err != nil {
		return fmt.Sprintf("`%v`", k.value)
	}
	return "`" + strings.ReplaceAll(string(b), "|", `\|`) + "`"
}

func TestValuesTable(t *testing.T) {
	schema := loadSchema(t)
	keys := documentedKeys(loadValues(t), schema)
	if *printTable {
		nodes := schemaKeys(schema)
		var b strings.Builder
		b.WriteString("| key | default | description |\n|---|---|---|\n")
		for _, k := range keys {
			desc := ""
			if n := nodes[k.path]; n != nil {
				desc = strings.ReplaceAll(n.Description, "|", `\|`)
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k.path, defaultCell(k), desc)
		}
		fmt.Print(b.String())
	}

	rows := valuesTable(t)
	inTable := map[string]tableRow{}
	for _, r := range rows {
		if prev, dup := inTable[r.key]; dup {
			t.Errorf("%s:%d: `%s` is already in the table at line %d", valuesDoc, r.line, r.key, prev.line)
		}
		inTable[r.key] = r
	}
	inValues := map[string]bool{}
	for _, k := range keys {
		inValues[k.path] = true
		r, ok := inTable[k.path]
		if !ok {
			t.Errorf("chart/values.yaml key `%s` is missing from the values table of %s", k.path, valuesDoc)
			continue
		}
		if want := defaultCell(k); r.def != want {
			t.Errorf("%s:%d: `%s` default is %s, values.yaml says %s", valuesDoc, r.line, k.path, r.def, want)
		}
		if r.desc == "" {
			t.Errorf("%s:%d: `%s` has no description", valuesDoc, r.line, k.path)
		}
	}
	for _, r := range rows {
		if !inValues[r.key] {
			t.Errorf("%s:%d: `%s` is in the values table but no longer in chart/values.yaml (nor deprecated in chart/values.schema.json)", valuesDoc, r.line, r.key)
		}
	}
}

func TestValuesSchema(t *testing.T) {
	schema := loadSchema(t)
	nodes := schemaKeys(schema)
	inValues := map[string]bool{}
	for _, k := range valueKeys(loadValues(t), schema) {
		inValues[k.path] = true
		if _, ok := nodes[k.path]; !ok {
			t.Errorf("chart/values.yaml key `%s` is not described in chart/values.schema.json", k.path)
		}
	}
	paths := make([]string, 0, len(nodes))
	for p := range nodes {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		switch n := nodes[p]; {
		case n != nil && n.Deprecated && inValues[p]:
			t.Errorf("chart/values.yaml sets the deprecated `%s`: a default there would be mistaken for the user's old value", p)
		case (n == nil || !n.Deprecated) && !inValues[p]:
			t.Errorf("chart/values.schema.json describes `%s`, which chart/values.yaml does not have (nor is it deprecated)", p)
		}
		if n := nodes[p]; n == nil || strings.TrimSpace(n.Description) == "" {
			t.Errorf("chart/values.schema.json: `%s` has no description", p)
		}
	}
}

// TestValueKeys pins the walk itself: maps and leaves, lists as leaves,
// free-form maps not descended into, unknown maps descended into.
func TestValueKeys(t *testing.T) {
	schema := &schemaNode{Properties: map[string]*schemaNode{
		"a":            {Properties: map[string]*schemaNode{"b": {}}},
		"nodeSelector": {Type: "object"},
		"list":         {Type: "array"},
	}}
	values := map[string]any{
		"a":            map[string]any{"b": 1},
		"nodeSelector": map[string]any{"kubernetes.io/os": "linux"},
		"list":         []any{map[string]any{"x": 1}},
		"typo":         map[string]any{"c": true},
	}
	var got []string
	for _, k := range valueKeys(values, schema) {
		got = append(got, k.path)
	}
	want := []string{"a", "a.b", "list", "nodeSelector", "typo", "typo.c"}
	if !slices.Equal(got, want) {
		t.Fatalf("valueKeys = %v, want %v", got, want)
	}
	if cells := splitRow("| `a` | `\"x\\|y\"` | d |"); len(cells) != 3 || cells[1] != "`\"x|y\"`" {
		t.Fatalf("splitRow = %q", cells)
	}
}

// TestDocumentedKeys: a deprecated key only the schema has gets a row with
// no default; a deprecated key values.yaml still has is listed once.
func TestDocumentedKeys(t *testing.T) {
	schema := &schemaNode{Properties: map[string]*schemaNode{
		"settings": {Properties: map[string]*schemaNode{"profiles": {}}},
		"profiles": {Deprecated: true},
		"kept":     {Deprecated: true},
	}}
	values := map[string]any{"settings": map[string]any{"profiles": []any{}}, "kept": 1}
	var got []string
	for _, k := range documentedKeys(values, schema) {
		got = append(got, fmt.Sprintf("%s=%s", k.path, defaultCell(k)))
	}
	want := []string{"kept=`1`", "profiles=", "settings=", "settings.profiles=`[]`"}
	if !slices.Equal(got, want) {
		t.Fatalf("documentedKeys = %v, want %v", got, want)
	}
}
