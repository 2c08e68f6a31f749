package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type planJSON struct {
	Groups   []string         `json:"groups"`
	Sequence []int            `json:"sequence"`
	Counts   map[string]int64 `json:"counts"`
	Details  []struct {
		Key   string  `json:"key"`
		Ideal float64 `json:"ideal"`
		Count int64   `json:"desired"`
	} `json:"details"`
}

func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func planOK(t *testing.T, stdin string, args ...string) planJSON {
	t.Helper()
	code, out, errOut := run(t, stdin, append([]string{"plan", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("plan %q: exit %d, stderr %q", args, code, errOut)
	}
	var p planJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("plan %q: output is not JSON: %v\n%s", args, err, out)
	}
	return p
}

// planFileOK is planOK for -f of one workload: its entry of "workloads".
func planFileOK(t *testing.T, stdin string, args ...string) planJSON {
	t.Helper()
	code, out, errOut := run(t, stdin, append([]string{"plan", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("plan %q: exit %d, stderr %q", args, code, errOut)
	}
	var p struct {
		Workloads []planJSON `json:"workloads"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil || len(p.Workloads) != 1 {
		t.Fatalf("plan %q: want JSON with one workload (%v):\n%s", args, err, out)
	}
	return p.Workloads[0]
}

func TestPlanSeedExamples(t *testing.T) {
	root := filepath.Join("..", "..", "examples")
	p := planFileOK(t, "", "-f", filepath.Join(root, "aws-sample-nginx.yaml"))
	if p.Counts["karpenter.sh/capacity-type=on-demand"] != 4 || p.Counts["karpenter.sh/capacity-type=spot"] != 6 {
		t.Errorf("seed 004: counts %v, want on-demand 4, spot 6", p.Counts)
	}
	p = planFileOK(t, "", "-f", filepath.Join(root, "eks-blog-alpine.yaml"))
	want := map[string]int64{"nodesize=od4vcpu16gb": 1, "nodesize=spot4vcpu16gb": 5, "nodesize=spot8vcpu32gb": 4}
	for k, v := range want {
		if p.Counts[k] != v {
			t.Errorf("seed 000: counts %v, want %v", p.Counts, want)
		}
	}
}

// TestPlanJSONContract checks the documented JSON shape on several inputs:
// groups in strategy order, a sequence of N valid indexes whose tally is
// counts, and counts within floor/ceil of the ideal share.
func TestPlanJSONContract(t *testing.T) {
	for _, tc := range []struct {
		spec     string
		replicas string
		groups   []string
	}{
		{"a=1,weight=1:b=2,weight=1:c=3,weight=1", "7", []string{"a=1", "b=2", "c=3"}},
		{"x.io/z=q,kubernetes.io/arch=arm64,base=3,weight=2:x.io/z=q,weight=5", "41", []string{"x.io/z=q,kubernetes.io/arch=arm64", "x.io/z=q"}},
		{"k=v,weight=3", "0", []string{"k=v"}},
		{" k = v , base = 4 : k = w , weight = 1 ", "2", []string{"k=v", "k=w"}},
	} {
		p := planOK(t, "", "--strategy", tc.spec, "--replicas", tc.replicas)
		if strings.Join(p.Groups, "|") != strings.Join(tc.groups, "|") {
			t.Errorf("%s: groups %q, want %q", tc.spec, p.Groups, tc.groups)
		}
		tally := map[string]int64{}
		for _, gi := range p.Sequence {
			if gi < 0 || gi >= len(p.Groups) {
				t.Fatalf("%s: sequence index %d out of range", tc.spec, gi)
			}
			tally[p.Groups[gi]]++
		}
		if n := len(p.Sequence); tc.replicas != "" && n != atoi(t, tc.replicas) {
			t.Errorf("%s: %d sequence entries, want %s", tc.spec, n, tc.replicas)
		}
		for i, d := range p.Details {
			if p.Counts[d.Key] != tally[d.Key] || d.Count != tally[d.Key] || d.Key != p.Groups[i] {
				t.Errorf("%s: group %s: counts %d, details %d, tally %d", tc.spec, d.Key, p.Counts[d.Key], d.Count, tally[d.Key])
			}
			if float64(d.Count) < math.Floor(d.Ideal+1e-9) || float64(d.Count) > math.Ceil(d.Ideal-1e-9) {
				t.Errorf("%s: group %s has %d pods, ideal %v", tc.spec, d.Key, d.Count, d.Ideal)
			}
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}
	return n
}

func TestPlanFileFromStdinAndOverrides(t *testing.T) {
	const doc = `---
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: web
  annotations:
    apportion.dev/strategy: "kubernetes.io/arch=arm64,weight=1:kubernetes.io/arch=amd64,weight=1"
spec:
  replicas: 6
  template: {metadata: {}}
`
	p := planFileOK(t, doc, "-f", "-")
	if len(p.Sequence) != 6 || p.Counts["kubernetes.io/arch=arm64"] != 3 {
		t.Errorf("rollout from stdin: %+v", p)
	}
	p = planFileOK(t, doc, "-f", "-", "--replicas", "3")
	if len(p.Sequence) != 3 {
		t.Errorf("--replicas did not override spec.replicas: %d pods", len(p.Sequence))
	}
	p = planOK(t, doc, "-f", "-", "--strategy", "a=b,weight=1")
	if len(p.Groups) != 1 || len(p.Sequence) != 6 {
		t.Errorf("--strategy did not override the file: %+v", p)
	}
	const noReplicas = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\nspec:\n  template:\n    metadata:\n      annotations:\n        custom-pod-schedule-strategy: a=b,weight=1\n"
	if p = planFileOK(t, noReplicas, "-f", "-"); len(p.Sequence) != 1 {
		t.Errorf("unset spec.replicas should mean 1, got %d pods", len(p.Sequence))
	}
}

func TestPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noStrategy := write("plain.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n")
	service := write("service.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n")
	notYAML := write("junk.yaml", "{{{ not yaml")
	two := write("two.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, annotations: {apportion.dev/strategy: 'a=b,weight=1'}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b, annotations: {apportion.dev/strategy: 'a=b,weight=1'}}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan"}, "--strategy or -f is required"},
		{[]string{"plan", "--strategy", "a=b,weight=1"}, "--replicas is required"},
		{[]string{"plan", "--strategy", "", "--replicas", "1"}, "strategy is empty"},
		{[]string{"plan", "--strategy", "a=b:c=d", "--replicas", "1"}, "every group has weight 0"},
		{[]string{"plan", "--strategy", "a=b,weight=1:c=d,weight=z", "--replicas", "1"}, `group 2, item 2 "weight=z"`},
		{[]string{"plan", "--strategy", "a=b,weight=1", "--replicas", "-1"}, `invalid argument "-1" for "--replicas" flag: must be a non-negative integer`},
		{[]string{"plan", "--strategy", "a=b,weight=1", "--replicas", "two"}, `invalid argument "two" for "--replicas" flag`},
		{[]string{"plan", "--strategy", "a=b,weight=1", "--replicas", "0x10"}, `invalid argument "0x10" for "--replicas" flag`},
		{[]string{"plan", "-strategy", "a=b,weight=1", "--replicas", "1"}, "long flags take two dashes: --strategy"},
		{[]string{"plan", "--strategy", "a=b,weight=1", "-replicas=1"}, "long flags take two dashes: --replicas=1"},
		{[]string{"plan", "--strategy", "a=b,weight=25%", "--replicas", "1"}, "weights are ratios, not percentages; write weight=25"},
		{[]string{"plan", "--strategy", "karpenter.sh/capacity-type=on-demand,bsae=2,weight=1:karpenter.sh/capacity-type=spot,weight=3", "--replicas", "4"},
			`invalid strategy: group 1, item 2 "bsae=2": did you mean "base"?`},
		{[]string{"plan", "--strategy", "a=b,wieght=1:c=d,weight=3", "--replicas", "4"}, `group 1, item 2 "wieght=1": did you mean "weight"?`},
		{[]string{"plan", "--strategy", "a=b,base=4,weight=1,max=3", "--replicas", "4"}, `group 1: base 4 is more than max 3: the group can never hold its base`},
		{[]string{"plan", "--strategy", "a=b,weight=1", "--replicas", "1", "--strict"}, "--strict needs --nodepools"},
		{[]string{"plan", "--strategy", "a=b,weight=1", "--replicas", "1000001"}, `invalid argument "1000001" for "--replicas" flag: must be at most 1000000`},
		{[]string{"plan", "-f", two, "--replicas", "99999999999"}, `invalid argument "99999999999" for "--replicas" flag: must be at most 1000000`},
		{[]string{"plan", "--strategy", "a=b,weight=1", "--replicas", "1", "-o", "xml"}, `invalid argument "xml" for "-o, --output" flag: unknown output format: use table, wide, json, yaml`},
		{[]string{"plan", "--strategy", "a=b,weight=1", "--replicas", "1", "extra"}, `unexpected argument "extra"`},
		{[]string{"plan", "--bogus"}, "unknown flag: --bogus (see apportion plan --help)"},
		{[]string{"plan", "-f", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{"plan", "-f", noStrategy, "--strategy", "a=b,weight=1"}, "no strategy annotation on Deployment default/web"},
		{[]string{"plan", "-f", notYAML}, "junk.yaml: document 1: "},
		{[]string{"plan", "-f", two, "--strategy", "a=b,weight=1"}, "2 workloads carry a strategy"},
		{[]string{"plan", "-f", service}, "service.yaml: no Deployment, StatefulSet, ReplicaSet, Argo Rollout, Job or CronJob in the input"},
		{[]string{"plan", "-f", two, "--namespace-labels", "team-a"}, `--namespace-labels "team-a": want NAMESPACE=KEY=VALUE`},
		{[]string{"plan", "-f", two, "--namespace-labels", "team-a=team"}, `--namespace-labels "team-a=team": "team" is not KEY=VALUE`},
		{[]string{"plan", "-f", two, "--namespace-labels", "team-a=-x-=a"}, `label key "-x-"`},
		{[]string{"plan", "--strategy", "a=b,weight=1", "--replicas", "1", "--namespace-labels", "a=b=c"}, "--namespace-labels needs -f without --strategy"},
		{[]string{"frobnicate"}, `apportion: unknown command "frobnicate"`},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"version", "-o", "table"}, `unknown output format: use json, yaml`},
	} {
		code, out, errOut := run(t, "", tc.args...)
		if code != ExitUsage {
			t.Errorf("%q: exit %d, want %d", tc.args, code, ExitUsage)
		}
		if out != "" {
			t.Errorf("%q: wrote to stdout: %q", tc.args, out)
		}
		if !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%q: stderr %q, want one line containing %q", tc.args, errOut, tc.want)
		}
	}
}

func TestPlanTableAndVersion(t *testing.T) {
	code, out, _ := run(t, "", "plan", "--strategy", "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3", "--replicas", "3")
	if code != 0 || !strings.Contains(out, "karpenter.sh/capacity-type=spot") || !strings.Contains(out, "2.25") {
		t.Errorf("table output (exit %d):\n%s", code, out)
	}
	if code, out, _ := run(t, "", "version"); code != 0 || !strings.HasPrefix(out, "apportion ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

func TestPlanWithNodePools(t *testing.T) {
	dir := t.TempDir()
	pools := filepath.Join(dir, "pools.yaml")
	const body = `apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: on-demand}
spec:
  template:
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: spot}
spec:
  weight: 10
  template:
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
`
	if err := os.WriteFile(pools, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "plan", "-o", "json", "--nodepools", pools, "--replicas", "8",
		"--strategy", "karpenter.sh/capacity-type=on-demand,base=2,weight=1:nodesize=huge,weight=5:karpenter.sh/capacity-type=spot,weight=3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var p struct {
		Counts  map[string]int64 `json:"counts"`
		Details []struct {
			NodePool    string `json:"nodePool"`
			Unavailable string `json:"leftOut"`
		} `json:"details"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	// nodesize=huge has no pool: left out, the others split 2 + 6*(1:3).
	if p.Counts["nodesize=huge"] != 0 || p.Counts["karpenter.sh/capacity-type=on-demand"] != 3 || p.Counts["karpenter.sh/capacity-type=spot"] != 5 {
		t.Errorf("counts %v, want on-demand 3, huge 0, spot 5", p.Counts)
	}
	if p.Details[0].NodePool != "on-demand" || p.Details[2].NodePool != "spot" ||
		!strings.HasPrefix(p.Details[1].Unavailable, `label key "nodesize" is on none of the NodePools (a typo?); no NodePool can serve the group: `) {
		t.Errorf("details %+v", p.Details)
	}
	code, _, errOut = run(t, "", "plan", "--nodepools", pools, "--replicas", "1", "--strategy", "zone=x,weight=1")
	if code != ExitUsage || !strings.Contains(errOut, "no NodePool serves any group") {
		t.Errorf("no servable group: exit %d, %q", code, errOut)
	}
	code, _, errOut = run(t, "", "plan", "--nodepools", filepath.Join(dir, "none.yaml"), "--replicas", "1", "--strategy", "a=b,weight=1")
	if code != ExitUsage || !strings.Contains(errOut, "none.yaml: no such file") {
		t.Errorf("missing pools file: exit %d, %q", code, errOut)
	}
}

func TestWebhookUsageAndBadFlags(t *testing.T) {
	if code, out, _ := run(t, "", "webhook", "-h"); code != 0 || !strings.Contains(out, "Usage:\n  apportion webhook") || !strings.Contains(out, "      --gate-timeout duration ") {
		t.Errorf("webhook -h: exit %d, %q", code, out)
	}
	code, _, errOut := run(t, "", "webhook", "--no-such-flag")
	if code != ExitUsage || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "no-such-flag") {
		t.Errorf("webhook --no-such-flag: exit %d, stderr %q; want one line and exit %d", code, errOut, ExitUsage)
	}
	if code, _, errOut := run(t, "", "webhook", "--gate-timeout=0s"); code != ExitUsage || !strings.Contains(errOut, "--gate-timeout must be positive") {
		t.Errorf("webhook --gate-timeout=0s: exit %d, stderr %q", code, errOut)
	}
}

// TestPlanCaps: plan prints a capped group's count with its cap, and the
// pods beyond every cap as such: in the table, in the order (as "-") and in
// JSON (beyondCaps, and -1 in the sequence).
func TestPlanCaps(t *testing.T) {
	spec := "karpenter.sh/capacity-type=on-demand,weight=1,max=2:karpenter.sh/capacity-type=spot,weight=1,max=3"
	code, out, errOut := run(t, "", "plan", "--strategy", spec, "--replicas", "7")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"2 (cap 2)", "3 (cap 3)", "beyond caps: 2", "0 1 0 1 1 - -"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = run(t, "", "plan", "-o", "json", "--strategy", spec, "--replicas", "7")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var p struct {
		Sequence   []int `json:"sequence"`
		BeyondCaps int64 `json:"beyondCaps"`
		Details    []struct {
			Max   int32 `json:"cap"`
			Count int64 `json:"desired"`
		} `json:"details"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.BeyondCaps != 2 || p.Sequence[5] != -1 || p.Sequence[6] != -1 || p.Details[0].Max != 2 || p.Details[0].Count != 2 || p.Details[1].Count != 3 {
		t.Errorf("JSON %s", out)
	}
	p2 := planOK(t, "", "--strategy", "karpenter.sh/capacity-type=on-demand,weight=1,max=3:karpenter.sh/capacity-type=spot,weight=1", "--replicas", "10")
	if p2.Counts["karpenter.sh/capacity-type=on-demand"] != 3 || p2.Counts["karpenter.sh/capacity-type=spot"] != 7 {
		t.Errorf("at most 3 on on-demand: counts %v", p2.Counts)
	}
}
