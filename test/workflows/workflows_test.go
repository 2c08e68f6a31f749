package workflows

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// root is the repository's top folder: go test runs in the package's.
var root = filepath.Join("..", "..")

// workflow is what this test reads of a GitHub workflow: its steps' scripts.
type workflow struct {
	Jobs map[string]struct {
		Steps []struct {
			Name string `json:"name"`
			Run  string `json:"run"`
		} `json:"steps"`
	} `json:"jobs"`
}

// call is one `make TARGET` of a workflow.
type call struct {
	where  string // file, job and step
	target string
}

// workflowCalls returns the make targets the steps of the workflow named
// file run, in the order of its jobs' names.
func workflowCalls(file string, data []byte) ([]call, error) {
	var w workflow
	if err := yaml.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(w.Jobs) == 0 {
		return nil, fmt.Errorf("%s: no jobs", file)
	}
	jobs := make([]string, 0, len(w.Jobs))
	for j := range w.Jobs {
		jobs = append(jobs, j)
	}
	sort.Strings(jobs)
	var out []call
	for _, j := range jobs {
		for i, s := range w.Jobs[j].Steps {
			for _, t := range makeTargets(s.Run) {
				out = append(out, call{where: fmt.Sprintf("%s: job %s, step %d %q", file, j, i+1, s.Name), target: t})
			}
		}
	}
	return out, nil
}

// commands splits a shell script into simple commands, each a list of
// words with their quotes removed: it ends a command at a newline, ;, &,
// |, ( or ) outside quotes, joins lines ending in a backslash and drops
// comments. It is enough for the scripts of a workflow, not a shell.
func commands(script string) [][]string {
	var (
		cmds  [][]string
		cmd   []string
		word  strings.Builder
		inW   bool
		quote rune
	)
	endWord := func() {
		if inW {
			cmd = append(cmd, word.String())
			word.Reset()
			inW = false
		}
	}
	endCmd := func() {
		endWord()
		if len(cmd) > 0 {
			cmds = append(cmds, cmd)
			cmd = nil
		}
	}
	rs := []rune(script)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case r == '\\' && i+1 < len(rs):
			i++
			if rs[i] != '\n' {
				word.WriteRune(rs[i])
				inW = true
			}
		case r == '\'' || r == '"':
			quote, inW = r, true
		case r == '#' && !inW:
			for i+1 < len(rs) && rs[i+1] != '\n' {
				i++
			}
		case r == '&' && inW && strings.HasSuffix(word.String(), ">"):
			word.WriteRune(r) // 2>&1
		case strings.ContainsRune("\n;&|()", r):
			endCmd()
		case r == ' ' || r == '\t':
			endWord()
		default:
			word.WriteRune(r)
			inW = true
		}
	}
	endCmd()
	return cmds
}

var (
	assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	// expression is a GitHub expression, which Actions replaces before
	// the shell reads the script.
	expression = regexp.MustCompile(`\$\{\{.*?\}\}`)
)

// makeTargets returns the targets of each make command of script, past
// the prefixes a workflow puts before it (sudo, env, assignments, time).
// A make without a target (the default goal) names none.
func makeTargets(script string) []string {
	var out []string
	for _, words := range commands(expression.ReplaceAllString(script, "EXPRESSION")) {
		words = stripPrefixes(words)
		if len(words) == 0 || words[0] != "make" {
			continue
		}
		for i := 1; i < len(words); i++ {
			w := words[i]
			switch {
			case w == "-C" || w == "-f" || w == "-o" || w == "-W" || w == "-I":
				i++ // the option's argument
			case strings.HasPrefix(w, "-"), assignment.MatchString(w), strings.ContainsAny(w, "<>"):
				if strings.HasSuffix(w, ">") || strings.HasSuffix(w, "<") {
					i++ // a redirection's file
				}
			default:
				out = append(out, w)
			}
		}
	}
	return out
}

func stripPrefixes(words []string) []string {
	for len(words) > 0 {
		switch w := words[0]; {
		case w == "sudo" || w == "env":
			words = words[1:]
			for len(words) > 0 && strings.HasPrefix(words[0], "-") {
				if words[0] == "-u" || words[0] == "-g" {
					words = words[1:]
				}
				words = words[1:]
			}
		case w == "time" || w == "exec" || w == "do" || w == "then" || w == "else" || w == "{" || w == "!" ||
			assignment.MatchString(w):
			words = words[1:]
		default:
			return words
		}
	}
	return words
}

// ruleLine is a line of the Makefile that names targets: `a b: prereqs`,
// not an assignment (:=, ::=) and not a recipe (a tab first).
var ruleLine = regexp.MustCompile(`^([^\t#:=][^:=#]*?)\s*:([^=]|$)`)

// makefileTargets returns the targets the Makefile names literally
// (those whose name is a variable, such as $(GOLANGCI_LINT), and the
// special ones such as .PHONY are left out).
func makefileTargets(makefile string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(makefile, "\n") {
		m := ruleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, t := range strings.Fields(m[1]) {
			if !strings.HasPrefix(t, ".") && !strings.Contains(t, "$") && !strings.Contains(t, "%") {
				out[t] = true
			}
		}
	}
	return out
}

// unknown returns the calls whose target the Makefile lacks, one line each.
func unknown(calls []call, targets map[string]bool) []string {
	var out []string
	for _, c := range calls {
		if !targets[c.target] {
			out = append(out, fmt.Sprintf("%s: make %s: the Makefile has no target %s", c.where, c.target, c.target))
		}
	}
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readWorkflows returns the make calls of every workflow, by file name.
func readWorkflows(t *testing.T) map[string][]call {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, ".github", "workflows", "*.y*ml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]call{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		calls, err := workflowCalls(filepath.Base(f), b)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = calls
	}
	return out
}

func TestWorkflowsRunMakefileTargets(t *testing.T) {
	targets := makefileTargets(readFile(t, "Makefile"))
	// The parse found the Makefile's targets, or nothing below means much.
	for _, want := range []string{"verify", "test", "e2e", "release", "release-push"} {
		if !targets[want] {
			t.Fatalf("no target %s among the Makefile's targets read: %v", want, targets)
		}
	}
	workflows := readWorkflows(t)
	for _, f := range []string{"ci.yaml", "release.yaml"} {
		if len(workflows[f]) == 0 {
			t.Errorf(".github/workflows/%s runs no make target (found: %v)", f, workflows)
		}
	}
	for f, calls := range workflows {
		for _, u := range unknown(calls, targets) {
			t.Error(u)
		}
		t.Logf("%s: %d make calls", f, len(calls))
	}
}

// TestCIRunsWhatCIScriptRuns: the CI workflow calls every target .ci/run
// calls, so a check added to one is not missing from the other.
func TestCIRunsWhatCIScriptRuns(t *testing.T) {
	want := makeTargets(readFile(t, ".ci/run"))
	if len(want) < 5 {
		t.Fatalf(".ci/run: only the make targets %v read", want)
	}
	var got []string
	for _, c := range readWorkflows(t)["ci.yaml"] {
		got = append(got, c.target)
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf(".ci/run calls make %s; .github/workflows/ci.yaml does not (it calls %v)", w, got)
		}
	}
}

func TestMadeUpTargetIsReported(t *testing.T) {
	targets := makefileTargets("# a Makefile\nVERSION ?= $(shell git describe 2>/dev/null || echo dev)\n" +
		"LDFLAGS := -X a=b\n.PHONY: verify\nverify: $(LINT) ## check\n\t@echo make not-a-rule\n" +
		"a b: verify\n$(LINT):\n\tgo install\n")
	if want := map[string]bool{"verify": true, "a": true, "b": true}; !mapsEqual(targets, want) {
		t.Fatalf("targets %v, want %v", targets, want)
	}
	wf := []byte(`name: x
on: push
jobs:
  check:
    runs-on: ubuntu-latest
    steps:
      - name: real
        run: make verify
      - name: made up
        run: |
          make verify &&
            sudo -E env "PATH=$PATH" make no-such-target VERSION=v1
`)
	calls, err := workflowCalls("x.yaml", wf)
	if err != nil {
		t.Fatal(err)
	}
	got := unknown(calls, targets)
	if len(got) != 1 || !strings.Contains(got[0], `step 2 "made up": make no-such-target`) {
		t.Errorf("unknown targets reported: %q, want no-such-target of step 2", got)
	}
	if _, err := workflowCalls("y.yaml", []byte("jobs: [1")); err == nil {
		t.Error("a workflow that is not YAML was read")
	}
}

func TestMakeTargets(t *testing.T) {
	for script, want := range map[string][]string{
		"make verify":                                    {"verify"},
		"make helm-lint && make test-chart":              {"helm-lint", "test-chart"},
		`make release VERSION="$VERSION"`:                {"release"},
		"make release VERSION=${{ github.ref_name }}":    {"release"},
		`sudo -E env "PATH=$PATH" "HOME=$HOME" make e2e`: {"e2e"},
		"make e2e 2>&1 | tee \"$log\" || status=$?":      {"e2e"},
		"make -C . -j2 test >out.txt test-race":          {"test", "test-race"},
		"make soak DURATION=10m \\\n  SOAK_OUT=x":        {"soak"},
		"FOO=1 time make image":                          {"image"},
		"# make commented-out\necho 'make quoted'":       nil,
		"command -v make >/dev/null; cmake build":        nil,
		"missing+=(make)":                                nil,
		"for s in a; do make \"$s\"; done":               {"$s"},
	} {
		if got := makeTargets(script); !slices.Equal(got, want) {
			t.Errorf("makeTargets(%q) = %q, want %q", script, got, want)
		}
	}
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
