package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/pkg/plan"
)

// column is a table column and the JSON keys of the numbers it shows, in
// the JSON object of the table's row ("groups.desired": in each of the
// row's groups).
type column struct {
	header string
	keys   []string
	// why the header is not the first key's name; "" when it is (upper
	// case, spaces dropped, an s for a column listing a key of each group).
	why string
}

// tableVocabulary declares, for each table the CLI prints, each column and
// the JSON keys it shows: the same words in both, or the reason not.
var tableVocabulary = []struct {
	name string
	row  reflect.Type // the JSON object of a row
	cols []column
}{
	{"plan", reflect.TypeFor[plan.Group](), []column{
		{"#", nil, `the group's index in "groups", as "sequence" counts it`},
		{"GROUP", []string{"key"}, "a group is named by its key"},
		{"BASE", []string{"base"}, ""},
		{"WEIGHT", []string{"weight"}, ""},
		{"NODEPOOL", []string{"nodePool", "leftOut"}, ""},
		{"IDEAL", []string{"ideal"}, ""},
		{"FLOOR", []string{"floor"}, ""},
		{"CEILING", []string{"ceiling"}, ""},
		{"DESIRED", []string{"desired", "cap"}, ""},
		{"TOLERATIONS", []string{"tolerations"}, ""},
	}},
	{"status", reflect.TypeFor[explain.WorkloadReport](), []column{
		{"NAMESPACE", []string{"namespace"}, ""},
		{"WORKLOAD", []string{"kind", "name"}, "kind/name, as kubectl names an object"},
		{"MODE", []string{"mode"}, ""},
		{"REPLICAS", []string{"replicas"}, ""},
		{"GROUPS", []string{"groups", "groups.key"}, ""},
		{"DESIRED", []string{"groups.desired", "groups.cap"}, ""},
		{"DECIDED", []string{"groups.decided", "groups.shadow"}, ""},
		{"RUNNING", []string{"groups.actual"}, "a group's Running pods are actual in JSON, as in a PlacementPolicy's status"},
		{"DRIFT", []string{"drift", "notPlaced"}, ""},
		{"NODEPOOLS", []string{"groups.nodePool"}, ""},
		{"SOURCE", []string{"source"}, ""},
		{"STRATEGY", []string{"strategy"}, ""},
	}},
	{"explain", reflect.TypeFor[explain.GroupReport](), []column{
		{"GROUP", []string{"key"}, "a group is named by its key"},
		{"NODEPOOL", []string{"nodePool"}, ""},
		{"DESIRED", []string{"desired", "cap"}, ""},
		{"RUNNING", []string{"actual"}, "a group's Running pods are actual in JSON, as in a PlacementPolicy's status"},
		{"QUOTA NOW", []string{"floor", "ceiling"}, "the range floor-ceiling, within quota"},
		{"DECIDED", []string{"decided"}, ""},
		{"WOULD DECIDE", []string{"shadow"}, "shadow mode's DECIDED"},
		{"STRAYS", []string{"strays"}, ""},
		{"LEFT OUT", []string{"leftOut"}, ""},
	}},
}

// hasJSONKey reports whether t's JSON objects have the key path
// ("groups.desired": desired in each of groups), embedded structs'
// fields included.
func hasJSONKey(t reflect.Type, path string) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	key, rest, nested := strings.Cut(path, ".")
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "" && f.Anonymous:
			if hasJSONKey(f.Type, path) {
				return true
			}
		case tag == key && !nested:
			return true
		case tag == key:
			return hasJSONKey(f.Type, rest)
		}
	}
	return false
}

// headerCells reads a table's header line: its cells are two spaces or
// more apart.
func headerCells(line string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
}

// headerLine is the first line of out that starts with prefix.
func headerLine(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no header starting %q in:\n%s", prefix, out)
	return ""
}

// TestTableVocabulary: every column of every table is declared in
// tableVocabulary with the JSON keys it shows, which the row's JSON has,
// and is named as the first of them unless declared otherwise; a
// declared column no table prints fails too.
func TestTableVocabulary(t *testing.T) {
	printed := map[string][]string{}

	pools := filepath.Join(t.TempDir(), "pools.yaml")
	od := strings.ReplaceAll(strings.ReplaceAll(spotPool, "name: spot", "name: od"), "[spot]", "[on-demand]")
	if err := os.WriteFile(pools, []byte(spotPool+"---\n"+od), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"plan", "--strategy", cappedStrategy, "--replicas", "5"},
		{"plan", "-o", "wide", "--strategy", cappedStrategy, "--replicas", "5", "--nodepools", pools},
	} {
		code, out, errOut := run(t, "", args...)
		if code != ExitOK {
			t.Fatalf("%q: exit %d, %s", args, code, errOut)
		}
		printed["plan"] = append(printed["plan"], headerCells(headerLine(t, out, "#"))...)
	}

	cl := explainCluster(t)
	ctx := t.Context()
	reports, err := cl.Status(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, wide := range []bool{false, true} {
		var out bytes.Buffer
		if err := writeStatus(&out, reports, wide); err != nil {
			t.Fatal(err)
		}
		printed["status"] = append(printed["status"], headerCells(headerLine(t, out.String(), "NAMESPACE"))...)
	}
	r, err := cl.Workload(ctx, explain.Ref{Kind: "Deployment", Namespace: "shop", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"required", "shadow"} {
		r.Mode = mode
		var out bytes.Buffer
		if err := writeWorkload(&out, r); err != nil {
			t.Fatal(err)
		}
		printed["explain"] = append(printed["explain"], headerCells(headerLine(t, out.String(), "GROUP "))...)
	}

	for _, table := range tableVocabulary {
		declared := map[string]bool{}
		for _, c := range table.cols {
			declared[c.header] = true
			if !slices.Contains(printed[table.name], c.header) {
				t.Errorf("%s: column %s declared, but no table prints it: %q", table.name, c.header, printed[table.name])
			}
			for _, k := range c.keys {
				if !hasJSONKey(table.row, k) {
					t.Errorf("%s: column %s shows %q, which %s's JSON does not have", table.name, c.header, k, table.row)
				}
			}
			if c.why != "" {
				continue
			}
			name := strings.ToUpper(strings.ReplaceAll(c.header, " ", ""))
			key := strings.ToUpper(c.keys[0])
			if g, ok := strings.CutPrefix(key, "GROUPS."); ok {
				// A column listing a key of each group.
				if name == g+"S" {
					name = g
				}
				key = g
			}
			if name != key {
				t.Errorf("%s: column %s shows the JSON key %q: one word for one thing, or say why", table.name, c.header, c.keys[0])
			}
		}
		for _, h := range printed[table.name] {
			if !declared[h] {
				t.Errorf("%s: column %q is not in tableVocabulary: declare the JSON key it shows", table.name, h)
			}
		}
	}
}
