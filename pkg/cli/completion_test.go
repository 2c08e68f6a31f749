package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// asKubectlPlugin runs the test as kubectl-apportion.
func asKubectlPlugin(t *testing.T) {
	saved := Program
	t.Cleanup(func() { Program = saved })
	Program = ProgramFor("/usr/local/bin/" + PluginName)
}

// TestCompletion: `kubectl apportion completion SHELL` prints a script for
// the binary kubectl runs, and the __complete command it calls answers.
func TestCompletion(t *testing.T) {
	asKubectlPlugin(t)
	for shell, want := range map[string]string{
		"bash":       "complete -o default -F __start_kubectl-apportion kubectl-apportion",
		"zsh":        "#compdef kubectl-apportion",
		"fish":       "complete -c kubectl-apportion ",
		"powershell": "Register-ArgumentCompleter -CommandName 'kubectl-apportion'",
	} {
		code, out, errOut := run(t, "", "completion", shell)
		if code != ExitOK || errOut != "" || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q; output lacks %q", shell, code, errOut, want)
		}
	}
	code, out, _ := run(t, "", "__complete", "release-gates", "--all-n")
	if code != ExitOK || !strings.Contains(out, "--all-namespaces") {
		t.Errorf("__complete release-gates --all-n: exit %d:\n%s", code, out)
	}
	code, out, _ = run(t, "", "__complete", "completion", "")
	if code != ExitOK || !strings.Contains(out, "powershell") {
		t.Errorf("__complete completion: exit %d:\n%s", code, out)
	}
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		if code, _, errOut := run(t, "", args...); code != ExitUsage {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, errOut)
		}
	}
	if _, out, _ := run(t, "", "completion", "--help"); !strings.Contains(out, "kubectl_complete-apportion") {
		t.Errorf("completion --help does not say how kubectl completes the plugin:\n%s", out)
	}
}

// TestExamplesAsPlugin: run as kubectl-apportion, every command's examples
// say kubectl apportion.
func TestExamplesAsPlugin(t *testing.T) {
	asKubectlPlugin(t)
	bare := regexp.MustCompile(`(?m)^\s*apportion |\(apportion `)
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		if c.Example != "" {
			seen++
			code, out, _ := run(t, "", append(strings.Fields(c.CommandPath())[1:], "--help")...)
			_, examples, _ := strings.Cut(out, "\nExamples:\n")
			examples, _, _ = strings.Cut(examples, ":\n") // up to the next section
			if code != ExitOK || !strings.Contains(examples, "\n  kubectl apportion ") || bare.MatchString(examples) {
				t.Errorf("%s --help as a plugin: exit %d:\n%s", c.CommandPath(), code, out)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(strings.NewReader(""), &strings.Builder{}, &strings.Builder{}))
	if seen < 9 {
		t.Errorf("%d commands with examples, want every one of the 9", seen)
	}
}
