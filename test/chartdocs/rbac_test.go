//go:build chart

package chartdocs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/apportion-dev/apportion/test/helmbin"
)

// The release the chart is rendered as, and the names its rules then carry
// (the table of docs/security.md shows the names of this release).
const (
	rbacRelease   = "apportion"
	rbacNamespace = "apportion-system"
	// The chart refuses to render without an image repository.
	imageRepositoryFlag = "controller.image.repository=registry.example.com/apportion"
)

// rbacDimensions are the values chart/templates/rbac.yaml depends on, with
// every value each can take: the chart is rendered with each combination.
// TestRBACTable fails when rbac.yaml reads a value that is not here, or when
// the schema allows a value that is not listed.
var rbacDimensions = []dimension{
	{"certificates.mode", []string{"self-managed", "cert-manager", "provided"}},
	{"settings.architectures", []string{"opt-in", "all", "off"}},
	{"webhook.scope", []string{"namespaces", "all"}},
	{"settings.rebalance", []string{"false", "true"}},
	{"settings.readPullSecrets", []string{"false", "true"}},
	// A rate: rbac.yaml tells only zero (off) from any positive rate, so
	// zero and one positive, fractional rate stand for every value.
	{"settings.capacityDeleteQPS", []string{"0", "0.5"}},
	{"controller.metrics.secure", []string{"false", "true"}},
}

// userRules are the values rbac.yaml copies into the ClusterRole as the
// user gave them: the user's own rules, not apportion's, which the README's
// table does not list (and the renders here leave empty).
var userRules = []string{"additionalClusterRoleRules"}

type dimension struct {
	key    string
	values []string
}

// dimensionIndex is the index of key in rbacDimensions, or -1.
func dimensionIndex(key string) int {
	return slices.IndexFunc(rbacDimensions, func(d dimension) bool { return d.key == key })
}

// mode is one combination: dimension key -> value.
type mode map[string]string

func (m mode) String() string {
	parts := make([]string, 0, len(m))
	for _, d := range rbacDimensions {
		if v, ok := m[d.key]; ok {
			parts = append(parts, d.key+"="+v)
		}
	}
	return strings.Join(parts, ",")
}

func allModes() []mode {
	modes := []mode{{}}
	for _, d := range rbacDimensions {
		var next []mode
		for _, m := range modes {
			for _, v := range d.values {
				n := mode{d.key: v}
				for k, x := range m {
					n[k] = x
				}
				next = append(next, n)
			}
		}
		modes = next
	}
	return modes
}

// permission is one verb on one resource: what a table row and a rendered
// rule both come down to.
type permission struct {
	scope    string // "cluster" (ClusterRole) or "release namespace" (Role)
	resource string // as kubectl names it: resource[.group][/subresource]
	verb     string
	names    string // resourceNames, sorted, comma-joined; "" for any
}

func (p permission) String() string {
	s := fmt.Sprintf("%s %s (%s", p.verb, p.resource, p.scope)
	if p.names != "" {
		s += ", only " + p.names
	}
	return s + ")"
}

// kubectlName is the resource as `kubectl auth can-i --list` prints it.
func kubectlName(group, resource string) string {
	res, sub, hasSub := strings.Cut(resource, "/")
	if group != "" {
		res += "." + group
	}
	if hasSub {
		res += "/" + sub
	}
	return res
}

// rulePermissions expands the rules of a ClusterRole or Role; anything the
// table cannot express (wildcards, non-resource URLs) is a problem.
func rulePermissions(scope string, rules []rbacv1.PolicyRule) ([]permission, []string) {
	var out []permission
	var problems []string
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			problems = append(problems, fmt.Sprintf("%s rule with nonResourceURLs %v", scope, r.NonResourceURLs))
		}
		names := slices.Clone(r.ResourceNames)
		sort.Strings(names)
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" || strings.HasSuffix(res, "/*") {
						problems = append(problems, fmt.Sprintf("%s rule with a wildcard: groups %v resources %v verbs %v", scope, r.APIGroups, r.Resources, r.Verbs))
					}
					out = append(out, permission{scope: scope, resource: kubectlName(g, res), verb: v, names: strings.Join(names, ",")})
				}
			}
		}
	}
	return out, problems
}

// rbacRow is one row of the RBAC table of docs/security.md.
type rbacRow struct {
	line        int
	permissions []permission
	when        func(mode) bool
	whenText    string
}

var (
	backticked = regexp.MustCompile("`([^`]*)`")
	clauseRE   = regexp.MustCompile("^(not )?`([A-Za-z0-9_.]+): ([^`]+)`$")
)

// rbacHeader is the header of the RBAC table of docs/security.md.
var rbacHeader = []string{"resource", "verbs", "scope", "when", "why"}

// readmeRBAC parses the RBAC table of docs/security.md: the markdown table with
// rbacHeader. Cells:
//
//	resource  `name`, `name`, ...           kubectl's resource[.group][/subresource]
//	verbs     get, list, ...
//	scope     cluster | release namespace [, only `name`, `name`]
//	when      always | clause [and clause ...], a clause `key: value` or not `key: value`
//	why       free text, not empty
func readmeRBAC(readme string) ([]rbacRow, []string) {
	lines := strings.Split(readme, "\n")
	var rows []rbacRow
	var problems []string
	bad := func(i int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf(rbacDoc+":%d: ", i+1)+fmt.Sprintf(format, args...))
	}
	tables := 0
	for i := 0; i < len(lines); i++ {
		if !slices.Equal(splitRow(strings.TrimSpace(lines[i])), rbacHeader) {
			continue
		}
		tables++
		for i += 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
			cells := splitRow(strings.TrimSpace(lines[i]))
			if len(cells) != len(rbacHeader) {
				bad(i, "an RBAC table row needs %d cells, got %d", len(rbacHeader), len(cells))
				continue
			}
			row := rbacRow{line: i + 1, whenText: cells[3]}
			resources := backticked.FindAllStringSubmatch(cells[0], -1)
			if len(resources) == 0 || backticked.ReplaceAllString(cells[0], "") != strings.Repeat(", ", len(resources)-1) {
				bad(i, "resource cell must be `name`, `name`, ...: %q", cells[0])
				continue
			}
			scope, only, hasNames := strings.Cut(cells[2], ", only ")
			if scope != "cluster" && scope != "release namespace" {
				bad(i, "scope must be \"cluster\" or \"release namespace\", optionally with \", only `name`\": %q", cells[2])
				continue
			}
			var names []string
			if hasNames {
				for _, m := range backticked.FindAllStringSubmatch(only, -1) {
					names = append(names, m[1])
				}
				if len(names) == 0 {
					bad(i, "scope names no object after \"only\": %q", cells[2])
					continue
				}
				sort.Strings(names)
			}
			when, err := parseWhen(cells[3])
			if err != nil {
				bad(i, "when: %v", err)
				continue
			}
			row.when = when
			if strings.TrimSpace(cells[4]) == "" {
				bad(i, "the row says not why")
			}
			verbs := strings.Split(cells[1], ",")
			for _, res := range resources {
				for _, v := range verbs {
					v = strings.TrimSpace(v)
					if v == "" {
						bad(i, "empty verb in %q", cells[1])
						continue
					}
					row.permissions = append(row.permissions, permission{scope: scope, resource: res[1], verb: v, names: strings.Join(names, ",")})
				}
			}
			rows = append(rows, row)
		}
	}
	if tables != 1 {
		problems = append(problems, fmt.Sprintf(rbacDoc+": want exactly one RBAC table with the header | %s |, found %d", strings.Join(rbacHeader, " | "), tables))
	}
	return rows, problems
}

// parseWhen parses a "when" cell into a predicate over modes.
func parseWhen(cell string) (func(mode) bool, error) {
	if cell == "always" {
		return func(mode) bool { return true }, nil
	}
	type clause struct {
		not        bool
		key, value string
	}
	var clauses []clause
	for _, c := range strings.Split(cell, " and ") {
		m := clauseRE.FindStringSubmatch(strings.TrimSpace(c))
		if m == nil {
			return nil, fmt.Errorf("%q: want always, or clauses `key: value` / not `key: value` joined by \" and \"", cell)
		}
		i := dimensionIndex(m[2])
		if i < 0 {
			return nil, fmt.Errorf("%q: the RBAC does not depend on %s", cell, m[2])
		}
		if !slices.Contains(rbacDimensions[i].values, m[3]) {
			return nil, fmt.Errorf("%q: %s is one of %v, never %q", cell, m[2], rbacDimensions[i].values, m[3])
		}
		clauses = append(clauses, clause{not: m[1] != "", key: m[2], value: m[3]})
	}
	return func(md mode) bool {
		for _, c := range clauses {
			if (md[c.key] == c.value) == c.not {
				return false
			}
		}
		return true
	}, nil
}

// compareRBAC checks, in every mode, that the permissions the chart renders
// are exactly those of the table rows whose condition holds, each stated
// once; and that every row holds in some mode. A problem found in several
// modes is reported once, with how many modes and the first of them.
func compareRBAC(rows []rbacRow, modes []mode, render func(mode) ([]permission, error)) []string {
	var order []string
	inModes := map[string][]mode{}
	report := func(m mode, format string, args ...any) {
		p := fmt.Sprintf(format, args...)
		if _, seen := inModes[p]; !seen {
			order = append(order, p)
		}
		inModes[p] = append(inModes[p], m)
	}
	applies := make([]bool, len(rows))
	for _, m := range modes {
		rendered, err := render(m)
		if err != nil {
			report(m, "rendering chart/templates/rbac.yaml: %v", err)
			continue
		}
		have := map[permission]bool{}
		for _, p := range rendered {
			have[p] = true
		}
		stated := map[permission]int{} // -> line of rbacDoc
		for k, r := range rows {
			if !r.when(m) {
				continue
			}
			applies[k] = true
			for _, p := range r.permissions {
				if prev, dup := stated[p]; dup {
					report(m, rbacDoc+":%d: %s is already stated at line %d", r.line, p, prev)
					continue
				}
				stated[p] = r.line
				if !have[p] {
					report(m, rbacDoc+":%d: says %s when %s, but chart/templates/rbac.yaml has no such rule", r.line, p, r.whenText)
				}
			}
		}
		var missing []string
		for p := range have {
			if _, ok := stated[p]; !ok {
				missing = append(missing, p.String())
			}
		}
		sort.Strings(missing)
		for _, p := range missing {
			report(m, "chart/templates/rbac.yaml grants %s, and the RBAC table of docs/security.md has no row for it (or its row's \"when\" excludes this)", p)
		}
	}
	var problems []string
	for _, p := range order {
		ms := inModes[p]
		problems = append(problems, fmt.Sprintf("%s (in %d of %d modes, e.g. %s)", p, len(ms), len(modes), ms[0]))
	}
	for k, r := range rows {
		if !applies[k] {
			problems = append(problems, fmt.Sprintf(rbacDoc+":%d: %q holds in no mode", r.line, r.whenText))
		}
	}
	return problems
}

// TestRBACTable renders chart/templates/rbac.yaml with helm in every
// combination of the values it depends on and checks that the
// RBAC table states exactly the rendered ClusterRole and Role rules:
// resource, verbs, scope, object names and the values under which each is
// granted. A rule added without a row, a row left without its rule, or a
// wrong condition fails it.
func TestRBACTable(t *testing.T) {
	template := string(read(t, "chart/templates/rbac.yaml"))
	for _, m := range regexp.MustCompile(`\.Values\.([A-Za-z0-9_.]+)`).FindAllStringSubmatch(template, -1) {
		if dimensionIndex(m[1]) < 0 && !slices.Contains(userRules, m[1]) {
			t.Errorf("chart/templates/rbac.yaml depends on .Values.%s, which rbacDimensions does not vary: add it with all its values", m[1])
		}
	}
	checkDimensionsCoverSchema(t)

	rows, problems := readmeRBAC(string(read(t, rbacDoc)))
	for _, p := range problems {
		t.Error(p)
	}
	if len(rows) == 0 {
		t.FailNow()
	}
	helm, err := helmbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	render := func(m mode) ([]permission, error) { return renderRBAC(t, helm, m) }
	for _, p := range compareRBAC(rows, allModes(), render) {
		t.Error(p)
	}
}

// checkDimensionsCoverSchema: each dimension lists every value the schema
// allows (its enum, or both booleans), or, for a number of minimum 0, zero
// and one positive value (rbac.yaml may only test whether it is zero).
func checkDimensionsCoverSchema(t *testing.T) {
	t.Helper()
	var schema map[string]any
	if err := json.Unmarshal(read(t, "chart/values.schema.json"), &schema); err != nil {
		t.Fatal(err)
	}
	for _, d := range rbacDimensions {
		node := schema
		for _, k := range strings.Split(d.key, ".") {
			props, _ := node["properties"].(map[string]any)
			node, _ = props[k].(map[string]any)
		}
		if node == nil {
			t.Errorf("chart/values.schema.json has no %s", d.key)
			continue
		}
		var allowed []string
		switch {
		case node["enum"] != nil:
			for _, v := range node["enum"].([]any) {
				allowed = append(allowed, fmt.Sprint(v))
			}
		case node["type"] == "boolean":
			allowed = []string{"false", "true"}
		case (node["type"] == "number" || node["type"] == "integer") && node["minimum"] == float64(0):
			if len(d.values) != 2 || d.values[0] != "0" {
				t.Errorf("rbacDimensions %s = %v: want zero and one positive value", d.key, d.values)
			} else if v, err := strconv.ParseFloat(d.values[1], 64); err != nil || v <= 0 {
				t.Errorf("rbacDimensions %s = %v: %q is not a positive number", d.key, d.values, d.values[1])
			}
			continue
		default:
			t.Errorf("chart/values.schema.json: %s has neither an enum nor type boolean; rbacDimensions cannot know its values", d.key)
			continue
		}
		got := slices.Clone(d.values)
		sort.Strings(got)
		sort.Strings(allowed)
		if !slices.Equal(got, allowed) {
			t.Errorf("rbacDimensions %s = %v, the schema allows %v", d.key, got, allowed)
		}
	}
}

// renderRBAC runs `helm template` on rbac.yaml in mode m and returns the
// permissions of its ClusterRole and Role.
func renderRBAC(t *testing.T, helm string, m mode) ([]permission, error) {
	t.Helper()
	args := []string{"template", rbacRelease, filepath.Join(repoRoot(t), "chart"), "-n", rbacNamespace,
		"--kube-version", "1.36.0", "--show-only", "templates/rbac.yaml",
		// Needed by certificates.mode=provided; unused in the other modes.
		"--set", "certificates.provided.secretName=example-tls,certificates.provided.caBundle=Cg==", "--set", imageRepositoryFlag}
	for _, d := range rbacDimensions {
		flag := "--set"
		if _, err := strconv.ParseFloat(m[d.key], 64); err == nil {
			flag = "--set-json" // --set reads 0.5 as a string
		}
		args = append(args, flag, d.key+"="+m[d.key])
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w\n%s", err, stderr.String())
	}
	var perms []permission
	roles := map[string]int{}
	for _, doc := range strings.Split(string(out), "\n---") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("parsing the rendered rbac.yaml: %w", err)
		}
		var scope string
		switch obj.Kind {
		case "ClusterRole":
			scope = "cluster"
		case "Role":
			if obj.Metadata.Namespace != rbacNamespace {
				return nil, fmt.Errorf("the Role is in namespace %q, not the release's", obj.Metadata.Namespace)
			}
			scope = "release namespace"
		default:
			continue
		}
		roles[obj.Kind]++
		p, problems := rulePermissions(scope, obj.Rules)
		if len(problems) > 0 {
			return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
		}
		perms = append(perms, p...)
	}
	if roles["ClusterRole"] != 1 || roles["Role"] != 1 {
		return nil, fmt.Errorf("want one ClusterRole and one Role in rbac.yaml, rendered %v", roles)
	}
	return perms, nil
}

// TestRBACCompare pins compareRBAC and the table parser on a made-up chart:
// a rule without a row, a row without a rule and a wrong condition are each
// reported; an exact table is not.
func TestRBACCompare(t *testing.T) {
	modes := []mode{
		{"settings.rebalance": "false", "certificates.mode": "self-managed"},
		{"settings.rebalance": "true", "certificates.mode": "provided"},
	}
	render := func(m mode) ([]permission, error) {
		out := []permission{{scope: "cluster", resource: "pods", verb: "get"}}
		if m["settings.rebalance"] == "true" {
			out = append(out, permission{scope: "cluster", resource: "pods/eviction", verb: "create"})
		}
		if m["certificates.mode"] == "self-managed" {
			out = append(out, permission{scope: "release namespace", resource: "secrets", verb: "get", names: "apportion-cert"})
		}
		return out, nil
	}
	table := func(rows ...string) string {
		return "text\n\n| resource | verbs | scope | when | why |\n|---|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n\nmore text\n"
	}
	const (
		pods     = "| `pods` | get | cluster | always | placing pods |"
		eviction = "| `pods/eviction` | create | cluster | `settings.rebalance: true` | rebalancing |"
		secret   = "| `secrets` | get | release namespace, only `apportion-cert` | `certificates.mode: self-managed` | certificates |"
	)
	for _, c := range []struct {
		name   string
		readme string
		want   []string // substrings, one problem each
	}{
		{"exact", table(pods, eviction, secret), nil},
		{"rule without a row", table(pods, secret), []string{"grants create pods/eviction (cluster), and the RBAC table of docs/security.md has no row for it"}},
		{"row without a rule", table(pods, eviction, secret, "| `nodes` | list | cluster | always | x |"), []string{"says list nodes (cluster) when always"}},
		{"wrong condition", table(pods, strings.Replace(eviction, "`settings.rebalance: true`", "always", 1), secret),
			[]string{"says create pods/eviction (cluster) when always"}},
		{"wrong names", table(pods, eviction, strings.Replace(secret, "apportion-cert", "other", 1)),
			[]string{"says get secrets (release namespace, only other)", "grants get secrets (release namespace, only apportion-cert)"}},
		{"wrong scope", table(pods, eviction, strings.Replace(secret, "release namespace", "cluster", 1)),
			[]string{"says get secrets (cluster, only apportion-cert)", "grants get secrets (release namespace, only apportion-cert)"}},
		{"duplicate row", table(pods, pods, eviction, secret), []string{"is already stated"}},
		{"never holds", table(pods, eviction, secret, "| `nodes` | list | cluster | `settings.rebalance: true` and not `settings.rebalance: true` | x |"),
			[]string{"holds in no mode"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, problems := readmeRBAC(c.readme)
			if len(problems) > 0 {
				t.Fatalf("parse: %v", problems)
			}
			got := compareRBAC(rows, modes, render)
			for _, w := range c.want {
				if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, w) }) {
					t.Errorf("no problem saying %q among %q", w, got)
				}
			}
			if len(c.want) == 0 && len(got) > 0 {
				t.Errorf("problems for an exact table: %q", got)
			}
		})
	}
	for _, bad := range []string{
		"| pods | get | cluster | always | x |",                          // no backticks
		"| `pods` | get | everywhere | always | x |",                     // scope
		"| `pods` | get | cluster | `settings.nope: true` | x |",         // unknown value
		"| `pods` | get | cluster | `settings.rebalance: maybe` | x |",   // impossible value
		"| `pods` | get | cluster | if `settings.rebalance: true` | x |", // grammar
		"| `pods` | get | cluster | always |  |",                         // no why
		"| `pods` | get | cluster, only | always | x |",                  // only what?
		"| `pods` | get | cluster | always |",                            // cells
	} {
		if _, problems := readmeRBAC(table(bad)); len(problems) == 0 {
			t.Errorf("row %s: no problem reported", bad)
		}
	}
	if _, problems := readmeRBAC("no table here\n"); len(problems) == 0 {
		t.Error("a page without the RBAC table: no problem reported")
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	helmbin.Cleanup()
	os.Exit(code)
}
