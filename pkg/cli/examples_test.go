package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/explain"
	"github.com/apportion-dev/apportion/pkg/plan"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/version"
)

// invocation is one run of the program in an example.
type invocation struct {
	line string   // the example's command line it is on
	args []string // after the program's name
	// piped: its stdin is another command's output (helm template,
	// kubectl get ...), which the fixtures stand in for.
	piped bool
}

// shellToken is a word or an operator of a command line.
type shellToken struct {
	text string
	op   bool
}

// shellOps are the operators the examples use; a word of its own for "{"
// and "}" only.
var shellOps = []string{"$(", "<(", "&&", "||", ">>", "2>", "|", ";", "(", ")", ">", "<"}

// shellTokens splits a command line as sh does, without expansion: quotes
// group, a backslash escapes outside single quotes.
func shellTokens(line string) ([]shellToken, error) {
	var out []shellToken
	var word strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			w := word.String()
			out = append(out, shellToken{text: w, op: w == "{" || w == "}"})
			word.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("unterminated %c in %q", c, line)
			}
			word.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case c == '\\' && i+1 < len(line):
			word.WriteByte(line[i+1])
			inWord = true
			i++
		case c == ' ' || c == '\t':
			flush()
		default:
			op := ""
			for _, o := range shellOps {
				if strings.HasPrefix(line[i:], o) && (o != "2>" || !inWord) {
					op = o
					break
				}
			}
			if op == "" {
				word.WriteByte(c)
				inWord = true
				continue
			}
			flush()
			out = append(out, shellToken{text: op, op: true})
			i += len(op) - 1
		}
	}
	flush()
	return out, nil
}

// exampleInvocations finds every run of the program in an Example: at the
// start of a command (of a line, after |, ;, &&, ||, (, $(, <( or {), as
// apportion or kubectl apportion; its arguments run up to the next
// operator, redirections left out. A line ending in |, \ or && goes on on
// the next one; lines starting with # are comments.
func exampleInvocations(example string) ([]invocation, error) {
	var lines []string
	pending := ""
	for _, l := range strings.Split(example, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		l = pending + l
		if strings.HasSuffix(l, "\\") {
			pending = strings.TrimSuffix(l, "\\") + " "
			continue
		}
		if strings.HasSuffix(l, "|") || strings.HasSuffix(l, "&&") {
			pending = l + " "
			continue
		}
		pending = ""
		lines = append(lines, l)
	}
	if pending != "" {
		return nil, fmt.Errorf("the example ends in a continued line: %q", pending)
	}
	var out []invocation
	for _, line := range lines {
		tokens, err := shellTokens(line)
		if err != nil {
			return nil, err
		}
		start, prevOp := true, ""
		for i := 0; i < len(tokens); i++ {
			tok := tokens[i]
			if tok.op {
				if tok.text == ">" || tok.text == ">>" || tok.text == "<" || tok.text == "2>" {
					i++ // the file
					continue
				}
				start, prevOp = tok.text != ")", tok.text
				continue
			}
			if !start {
				continue
			}
			start = false
			if tok.text == "kubectl" && i+1 < len(tokens) && tokens[i+1].text == "apportion" {
				i++
			} else if tok.text != "apportion" {
				continue
			}
			inv := invocation{line: line, args: []string{}, piped: prevOp == "|"}
			for i+1 < len(tokens) && !tokens[i+1].op {
				i++
				inv.args = append(inv.args, tokens[i].text)
			}
			out = append(out, inv)
		}
	}
	return out, nil
}

// TestExampleInvocations: the examples' shell is read as sh reads it.
func TestExampleInvocations(t *testing.T) {
	got, err := exampleInvocations(`  # a comment: apportion plan
  { helm template web ./chart -n shop; kubectl get x -o yaml; } |
    apportion plan -f - -o json
  source <(apportion completion bash)
  apportion completion zsh > "${fpath[1]}/_apportion"
  kubectl apportion explain 'pod/a b' -n "shop"
  bin/apportion version; apportion version -o \
    json
  printf 'apportion plan' > apportion`)
	if err != nil {
		t.Fatal(err)
	}
	want := []invocation{
		{args: []string{"plan", "-f", "-", "-o", "json"}, piped: true},
		{args: []string{"completion", "bash"}},
		{args: []string{"completion", "zsh"}},
		{args: []string{"explain", "pod/a b", "-n", "shop"}},
		{args: []string{"version", "-o", "json"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d invocations, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !slices.Equal(got[i].args, want[i].args) || got[i].piped != want[i].piped {
			t.Errorf("invocation %d: %q piped=%v, want %q piped=%v", i, got[i].args, got[i].piped, want[i].args, want[i].piped)
		}
	}
}

// exampleStops are the examples that run up to a point the test cannot go
// past, and the error they stop at there, having taken their flags.
var exampleStops = map[string]string{
	// A server that runs until stopped, on a live cluster: its flags are
	// taken and validated before the kubeconfig is read.
	"webhook": "loading kubeconfig",
}

// TestHelpExamples runs every command line of every command's Examples in
// testdata/examples, against fixtures: the files there, a fake API server
// (the cluster of explainCluster, with the pods and workloads the examples
// name) and a registry on loopback holding every image an inspect example
// names. Each must exit 0 with some output: an example naming a command, a
// flag, a value or an object the command does not take fails.
func TestHelpExamples(t *testing.T) {
	fixtures, err := filepath.Abs(filepath.Join("testdata", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := os.ReadFile(filepath.Join(fixtures, "stdin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The examples write files (kubectl ... > pools.yaml): a copy of the
	// fixtures takes them.
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fixtures)); err != nil {
		t.Fatal(err)
	}
	// The webhook's serving certificate, as the example expects it in
	// ./certs (read once it serves, which it does not here).
	if err := os.Mkdir(filepath.Join(dir, "certs"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, "certs", f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)

	host := inspectRegistry(t)
	config := fmt.Sprintf(`{"auths": {%q: {"username": "robot", "password": "hunter2"}}}`, host)
	if err := os.WriteFile("config.json", []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := kubeconfig(t, "https://127.0.0.1:1")
	t.Setenv("KUBECONFIG", kubeconfigPath)
	cluster := exampleCluster(t)
	saved := newClient
	t.Cleanup(func() { newClient = saved })
	newClient = func(*rest.Config, client.Options) (client.Client, error) { return cluster(), nil }

	var walk func(c *cobra.Command)
	commands := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Example == "" {
			return
		}
		commands++
		invs, err := exampleInvocations(c.Example)
		if err != nil || len(invs) == 0 {
			t.Errorf("%s: no command line in its examples (%v):\n%s", c.CommandPath(), err, c.Example)
			return
		}
		for _, inv := range invs {
			args := inv.args
			if len(args) > 0 && args[0] == "inspect" {
				args = pushExampleImages(t, c, host, args)
			}
			if len(args) > 0 && args[0] == "webhook" {
				// No cluster for the webhook: its kubeconfig is missing.
				t.Setenv("KUBECONFIG", filepath.Join(dir, "no-kubeconfig"))
			}
			in := ""
			if inv.piped {
				in = string(stdin)
			}
			var out, errOut bytes.Buffer
			code := Main(args, strings.NewReader(in), &out, &errOut)
			t.Setenv("KUBECONFIG", kubeconfigPath)
			name := ""
			if len(args) > 0 {
				name = args[0]
			}
			if stop, ok := exampleStops[name]; ok {
				if code == ExitOK || !strings.Contains(errOut.String(), stop) || strings.Contains(errOut.String(), "see ") {
					t.Errorf("%s example %q: exit %d, stderr %q; want it to stop at %q", c.CommandPath(), inv.line, code, errOut.String(), stop)
				}
				continue
			}
			if code != ExitOK || out.Len() == 0 {
				t.Errorf("%s example %q: exit %d, stdout %d bytes, stderr:\n%s", c.CommandPath(), inv.line, code, out.Len(), errOut.String())
			}
		}
	}
	walk(newRoot(strings.NewReader(""), &strings.Builder{}, &strings.Builder{}))
	if commands < 9 {
		t.Errorf("%d commands with examples, want every one of the 9", commands)
	}
}

// pushExampleImages serves the images an inspect example names from the
// registry at host, under their own names (host/public.ecr.aws/nginx/nginx:1.27),
// and returns the arguments naming them there.
func pushExampleImages(t *testing.T, root *cobra.Command, host string, args []string) []string {
	t.Helper()
	cmd, rest, err := root.Root().Find(args)
	if err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	fs := pflag.NewFlagSet("inspect", pflag.ContinueOnError)
	fs.AddFlagSet(cmd.Flags())
	if err := fs.Parse(rest); err != nil {
		return args // the run reports it
	}
	out := slices.Clone(args)
	for _, ref := range fs.Args() {
		local := host + "/" + ref
		pushIndex(t, local, v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Platform{OS: "linux", Architecture: "arm64"})
		out[slices.Index(out, ref)] = local
	}
	return out
}

// exampleCluster is explainCluster's Deployment shop/web with the objects
// the examples name: the pod web-7d4b9c5f6-x2x8k, the StatefulSet db of
// the kubeconfig context's namespace, and a gated pod; each call a client
// of a fresh copy.
func exampleCluster(t *testing.T) func() client.Client {
	t.Helper()
	base := explainCluster(t).Reader.(client.Client)
	ctx := t.Context()
	var objs []client.Object
	lists := []client.ObjectList{&appsv1.DeploymentList{}, &appsv1.ReplicaSetList{}, &corev1.PodList{}, &corev1.NodeList{}, &karpv1.NodePoolList{}}
	for _, l := range lists {
		if err := base.List(ctx, l); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range items {
			o := o.(client.Object)
			o.SetResourceVersion("")
			objs = append(objs, o)
		}
	}
	var rs *appsv1.ReplicaSet
	for _, o := range objs {
		if r, ok := o.(*appsv1.ReplicaSet); ok {
			rs = r
		}
	}
	labels := map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: "h1"}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	db := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "db", UID: "db", Annotations: map[string]string{annotations.Strategy: odSpotStrategy}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(1)), Selector: sel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel.MatchLabels}}}}
	dbPod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "db-0", UID: "db-0", Labels: sel.MatchLabels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(db, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		NodeName: "n-od", Phase: corev1.PodRunning, Group: "karpenter.sh/capacity-type=on-demand"})
	objs = append(objs, db, dbPod,
		test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-7d4b9c5f6-x2x8k", UID: "x2x8k", Labels: labels},
			Owner: rs, NodeName: "n-spot", Phase: corev1.PodRunning, Group: "karpenter.sh/capacity-type=spot"}),
		gatedPod("shop", "web-gated", gate),
	)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(capacity.NodePoolGVK, meta.RESTScopeRoot)
	mapper.Add(v1alpha1.PlacementPolicyGVK, meta.RESTScopeNamespace)
	mapper.Add(v1alpha1.ClusterPlacementPolicyGVK, meta.RESTScopeRoot)
	return func() client.Client {
		copies := make([]client.Object, len(objs))
		for i, o := range objs {
			copies[i] = o.DeepCopyObject().(client.Object)
		}
		return fake.NewClientBuilder().WithScheme(test.Scheme()).WithRESTMapper(mapper).WithObjects(copies...).
			WithIndex(&corev1.Pod{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).Build()
	}
}

// jsonKeyHelp are the output types of each command with -o json, whose
// JSON keys its help may name.
var jsonKeyHelp = map[string][]any{
	"plan":    {plan.Previews{}, plan.Result{}},
	"inspect": {inspectOutput{}},
	"explain": {explain.PodReport{}, explain.WorkloadReport{}},
	"status":  {explain.WorkloadReport{}},
	"version": {version.Info{}},
}

// jsonNames adds the JSON keys of t's fields, and of the structs they
// hold, at any depth, to names.
func jsonNames(t reflect.Type, names map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || names[t.PkgPath()+"."+t.Name()] {
		return
	}
	names[t.PkgPath()+"."+t.Name()] = true
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case tag == "-" || (!f.IsExported() && !f.Anonymous):
			continue
		case tag != "":
			names[tag] = true
		case !f.Anonymous:
			names[f.Name] = true
		}
		jsonNames(f.Type, names)
	}
}

// quotedKey is a JSON key as help quotes it: "nodePool".
var quotedKey = regexp.MustCompile(`"([a-z][A-Za-z]*)"`)

// TestHelpNamesJSONKeys: the keys a command's help quotes where it
// describes -o json are keys of its JSON; every command with -o json says
// which, or has no help on its keys to check.
func TestHelpNamesJSONKeys(t *testing.T) {
	root := newRoot(strings.NewReader(""), &strings.Builder{}, &strings.Builder{})
	for _, c := range root.Commands() {
		o := c.Flags().Lookup("output")
		if o == nil || !strings.Contains(o.Usage, "json") {
			continue
		}
		types, ok := jsonKeyHelp[c.Name()]
		if !ok {
			t.Errorf("%s has -o json: add its output types to jsonKeyHelp", c.Name())
			continue
		}
		names := map[string]bool{}
		for _, v := range types {
			jsonNames(reflect.TypeOf(v), names)
		}
		quoted := 0
		for _, para := range strings.Split(c.Long, "\n\n") {
			if !strings.Contains(para, "-o json") {
				continue
			}
			for _, m := range quotedKey.FindAllStringSubmatch(para, -1) {
				quoted++
				if !names[m[1]] {
					t.Errorf("%s --help names the JSON key %q, which its JSON does not have", c.Name(), m[1])
				}
			}
		}
		if c.Name() == "plan" && quoted < 20 {
			t.Errorf("plan --help quotes %d JSON keys, want each key of its JSON", quoted)
		}
	}
}
