package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestHelpOfEveryCommand: -h, --help and `apportion help CMD` print the
// same kubectl-style help on stdout, with exit status 0.
func TestHelpOfEveryCommand(t *testing.T) {
	for _, cmd := range []string{"plan", "inspect", "explain", "status", "webhook", "release-gates", "version", "completion"} {
		var first string
		for _, args := range [][]string{{cmd, "-h"}, {cmd, "--help"}, {"help", cmd}} {
			code, out, errOut := run(t, "", args...)
			if code != ExitOK || errOut != "" {
				t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
			}
			for _, section := range []string{"Usage:\n  apportion " + cmd, "\nExamples:\n  ", "\nFlags:\n", "  -h, --help "} {
				if !strings.Contains(out, section) {
					t.Errorf("%q: help lacks %q:\n%s", args, section, out)
				}
			}
			if regexp.MustCompile(`(?m)^  -[a-z][a-z]`).MatchString(out) {
				t.Errorf("%q: a long flag with one dash in:\n%s", args, out)
			}
			if first == "" {
				first = out
			} else if out != first {
				t.Errorf("%q: help differs from %s -h", args, cmd)
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, out, _ := run(t, "", args...)
		if code != ExitOK || !strings.Contains(out, "Available Commands:") || !strings.Contains(out, "\n  plan ") {
			t.Errorf("%q: exit %d:\n%s", args, code, out)
		}
	}
	// No command: the same list, on stderr, as a usage error.
	code, out, errOut := run(t, "")
	if code != ExitUsage || out != "" || !strings.Contains(errOut, "Available Commands:") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestExitCodes: usage errors 2, failures while running 1, through Main.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	pools := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(pools, []byte(spotPool), 0o600); err != nil {
		t.Fatal(err)
	}
	host := inspectRegistry(t)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"version"}, ExitOK},
		{[]string{"plan", "--strategy", "a=b,weight=1", "--replicas", "2"}, ExitOK},
		{[]string{"nope"}, ExitUsage},
		{[]string{"plan", "--nope"}, ExitUsage},
		{[]string{"plan", "--replicas"}, ExitUsage},
		{[]string{"plan", "--strategy", "a=b,weight=x", "--replicas", "1"}, ExitUsage},
		{[]string{"plan", "-o", "csv"}, ExitUsage},
		{[]string{"version", "-o", "csv"}, ExitUsage},
		{[]string{"inspect"}, ExitUsage},
		{[]string{"inspect", "-o", "csv", "busybox"}, ExitUsage},
		{[]string{"inspect", "Not A Reference"}, ExitUsage},
		{[]string{"webhook", "--nope"}, ExitUsage},
		{[]string{"webhook", "extra"}, ExitUsage},
		{[]string{"release-gates", "--nope"}, ExitUsage},
		{[]string{"explain"}, ExitUsage},
		{[]string{"explain", "daemonset/x"}, ExitUsage},
		{[]string{"explain", "web"}, ExitUsage},
		{[]string{"explain", "deploy/web", "-o", "wide"}, ExitUsage},
		{[]string{"status", "extra"}, ExitUsage},
		{[]string{"status", "-A", "-n", "shop"}, ExitUsage},
		// No cluster to read.
		{[]string{"explain", "deploy/web", "--kubeconfig", filepath.Join(dir, "absent")}, ExitFailure},
		{[]string{"status", "--kubeconfig", filepath.Join(dir, "absent")}, ExitFailure},
		{[]string{"release-gates", "--kubeconfig", filepath.Join(dir, "absent")}, ExitFailure},
		// At run time: the registry has no such image; a group is left out.
		{[]string{"inspect", host + "/public/absent:1"}, ExitFailure},
		{[]string{"plan", "--strict", "--nodepools", pools, "--replicas", "2", "--strategy", "karpenter.sh/capacity-type=spot,weight=1:zone=x,weight=1"}, ExitFailure},
		{[]string{"plan", "--strict", "--nodepools", pools, "--replicas", "2", "--strategy", "karpenter.sh/capacity-type=spot,weight=1"}, ExitOK},
	} {
		if code, _, errOut := run(t, "", tc.args...); code != tc.want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.args, code, tc.want, errOut)
		}
	}
}

const spotPool = `apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: spot, annotations: {apportion.dev/tolerate: "true"}}
spec:
  template:
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
      taints: [{key: dedicated, value: batch, effect: NoSchedule}]
`

// TestPlanStrict: the plan is still printed; the groups left out are named
// on stderr, in one line, with exit status 1. With no group served at all,
// --strict makes that exit 1 too.
func TestPlanStrict(t *testing.T) {
	pools := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(pools, []byte(strings.ReplaceAll(spotPool, "      taints:", "      #")), 0o600); err != nil {
		t.Fatal(err)
	}
	strategy := "karpenter.sh/capacity-type=on-demand,weight=1:karpenter.sh/capacity-type=spot,weight=1:zone=x,weight=2"
	code, out, errOut := run(t, "", "plan", "--strict", "--nodepools", pools, "--replicas", "4", "--strategy", strategy)
	if code != ExitFailure {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(out, "(none: left out)") {
		t.Errorf("the plan is not printed:\n%s", out)
	}
	if !strings.HasPrefix(errOut, "apportion plan: --strict: 2 of 3 groups left out") || !strings.Contains(errOut, "group 0 (karpenter.sh/capacity-type=on-demand)") ||
		!strings.Contains(errOut, "group 2 (zone=x)") || strings.Contains(errOut, "group 1") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("stderr %q", errOut)
	}
	// Without --strict the same plan succeeds.
	if lenient, _, _ := run(t, "", "plan", "--nodepools", pools, "--replicas", "4", "--strategy", strategy); lenient != ExitOK {
		t.Errorf("without --strict: exit %d", lenient)
	}
	code, _, errOut = run(t, "", "plan", "--strict", "--nodepools", pools, "--replicas", "1", "--strategy", "zone=x,weight=1")
	if code != ExitFailure || !strings.Contains(errOut, "--strict: no NodePool serves any group") {
		t.Errorf("no group served: exit %d, stderr %q", code, errOut)
	}
}

// TestPlanOutputFormats: -o yaml has the JSON's content; -o wide adds the
// floor, the ceiling and the tolerations; table stays the default.
func TestPlanOutputFormats(t *testing.T) {
	pools := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(pools, []byte(spotPool), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := "karpenter.sh/capacity-type=spot,base=1,weight=1:karpenter.sh/capacity-type=on-demand,weight=2"
	args := []string{"plan", "--replicas", "150", "--strategy", spec}
	_, jsonOut, _ := run(t, "", append(args, "-o", "json")...)
	code, yamlOut, errOut := run(t, "", append(args, "--output=yaml")...)
	if code != ExitOK {
		t.Fatalf("-o yaml: exit %d, %s", code, errOut)
	}
	var fromJSON, fromYAML map[string]any
	if err := json.Unmarshal([]byte(jsonOut), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(yamlOut), &fromYAML); err != nil {
		t.Fatalf("-o yaml: %v\n%s", err, yamlOut)
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) || fromJSON["groups"] == nil || fromJSON["sequence"] == nil || fromJSON["counts"] == nil {
		t.Errorf("yaml and json differ:\n%s\n%s", yamlOut, jsonOut)
	}

	_, table, _ := run(t, "", args...)
	_, explicit, _ := run(t, "", append(args, "-o", "table")...)
	if table != explicit || !strings.Contains(table, "#  GROUP") || strings.Contains(table, "FLOOR") || strings.Contains(table, "order (") {
		t.Errorf("default table (150 pods: no order line):\n%s", table)
	}
	_, wide, _ := run(t, "", append(args, "-o", "wide")...)
	if !regexp.MustCompile(`IDEAL +FLOOR +CEILING +DESIRED\n`).MatchString(wide) || !regexp.MustCompile(`(?m)^1 +karpenter.sh/capacity-type=on-demand +0 +2 +99\.333\S* +99 +100 +99$`).MatchString(wide) ||
		!strings.Contains(wide, "order (group # of pod 1..150): 0 1 0 1 1 0 ") {
		t.Errorf("wide:\n%s", wide)
	}
	_, wide, _ = run(t, "", "plan", "-o", "wide", "--nodepools", pools, "--replicas", "2", "--strategy", spec)
	if !regexp.MustCompile(`DESIRED +TOLERATIONS\n`).MatchString(wide) || !regexp.MustCompile(`(?m)^0 +karpenter.sh/capacity-type=spot +1 +1 +spot .* dedicated=batch:NoSchedule$`).MatchString(wide) ||
		!regexp.MustCompile(`(?m)^1 .*\(none: left out\) .* <none>$`).MatchString(wide) {
		t.Errorf("wide with pools:\n%s", wide)
	}
}

func TestVersionOutput(t *testing.T) {
	code, out, _ := run(t, "", "version", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var v map[string]string
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	keys := []string{"version", "commit", "buildDate", "goVersion", "karpenterVersion", "platform"}
	for _, k := range keys {
		if v[k] == "" {
			t.Errorf("no %q in %s", k, out)
		}
	}
	if len(v) != len(keys) || v["goVersion"] != runtime.Version() || v["platform"] != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version -o json: %s", out)
	}
	_, out, _ = run(t, "", "version", "-o", "yaml")
	var y map[string]string
	if err := yaml.Unmarshal([]byte(out), &y); err != nil || !reflect.DeepEqual(y, v) {
		t.Errorf("version -o yaml = %v (%v), want %v", y, err, v)
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		if code, out, _ := run(t, "", args...); code != ExitOK || !strings.HasPrefix(out, "apportion "+v["version"]+" (commit ") || strings.Count(out, "\n") != 1 {
			t.Errorf("%q: exit %d, %q", args, code, out)
		}
	}
}
