package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/explain"
)

// dataMaps hold data, not fields: their keys are group keys, label keys,
// or a pod's own fields.
var dataMaps = []string{"counts", "labels", "original"}

// jsonKeys adds to keys, for each key of v at any depth, the paths it is
// found at.
func jsonKeys(keys map[string][]string, path string, v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			keys[k] = append(keys[k], path+"."+k)
			if !slices.Contains(dataMaps, k) {
				jsonKeys(keys, path+"."+k, child)
			}
		}
	case []any:
		for _, child := range v {
			jsonKeys(keys, path+"[]", child)
		}
	}
}

// objectKeys are the keys of the objects at path (a path jsonKeys builds).
func objectKeys(keys map[string][]string, path string) []string {
	var out []string
	for k, paths := range keys {
		if slices.Contains(paths, path+"."+k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestJSONKeys: the JSON of every command names each thing with one
// lowerCamel key: a group's NodePool is nodePool in plan, explain and
// status alike, its cap cap, its count desired, its bounds floor and
// ceiling (not min and max: max=N is the strategy's cap),
// why it gets no pods leftOut, and why a workload is not placed
// notPlaced.
func TestJSONKeys(t *testing.T) {
	dir := t.TempDir()
	pools := filepath.Join(dir, "pools.yaml")
	manifest := filepath.Join(dir, "web.yaml")
	write := func(path, content string) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(pools, spotPool+"---\n"+strings.ReplaceAll(strings.ReplaceAll(spotPool, "name: spot", "name: od"), "[spot]", "[on-demand]"))
	write(manifest, `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, annotations: {`+annotations.Strategy+`: "`+cappedStrategy+`"}}
spec: {replicas: 5, selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c, image: nginx}]}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: bare, namespace: shop}
spec: {replicas: 1, selector: {matchLabels: {app: bare}}, template: {metadata: {labels: {app: bare}}, spec: {containers: [{name: c, image: nginx}]}}}
`)
	host := inspectRegistry(t)
	image := host + "/public/multi:keys"
	pushIndex(t, image, v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Platform{OS: "linux", Architecture: "arm64"})

	outputs := map[string]string{}
	for name, args := range map[string][]string{
		"plan":    {"plan", "-o", "json", "--strategy", cappedStrategy, "--replicas", "5", "--nodepools", pools},
		"plan -f": {"plan", "-o", "json", "-f", manifest, "--nodepools", pools},
		"inspect": {"inspect", "-o", "json", image},
		"version": {"version", "-o", "json"},
	} {
		code, out, errOut := run(t, "", args...)
		if code != ExitOK {
			t.Fatalf("%q: exit %d, stderr %q", args, code, errOut)
		}
		outputs[name] = out
	}
	cl := explainCluster(t)
	ctx := context.Background()
	var d appsv1.Deployment
	c := cl.Reader.(client.Client)
	if err := c.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "web"}, &d); err != nil {
		t.Fatal(err)
	}
	d.Annotations[annotations.Strategy] = cappedStrategy
	if err := c.Update(ctx, &d); err != nil {
		t.Fatal(err)
	}
	bare := d.DeepCopy()
	bare.ObjectMeta = metav1ObjectMeta("shop", "bare")
	if err := c.Create(ctx, bare); err != nil {
		t.Fatal(err)
	}
	for name, ref := range map[string]explain.Ref{
		"explain deployment":      {Kind: "Deployment", Namespace: "shop", Name: "web"},
		"explain bare deployment": {Kind: "Deployment", Namespace: "shop", Name: "bare"},
		"explain pod":             {Kind: "Pod", Namespace: "shop", Name: "web-1-0"},
	} {
		var out bytes.Buffer
		if err := runExplain(ctx, cl, ref, outputJSON, &out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		outputs[name] = out.String()
	}
	reports, err := cl.Status(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeStructured(&out, outputJSON, reports); err != nil {
		t.Fatal(err)
	}
	outputs["status"] = out.String()

	lowerCamel := regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)
	spellings := map[string]map[string]string{} // lower case: spelling: output
	keysOf := map[string]map[string][]string{}
	for name, out := range outputs {
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", name, err, out)
		}
		keys := map[string][]string{}
		jsonKeys(keys, "", v)
		keysOf[name] = keys
		for k, paths := range keys {
			if !lowerCamel.MatchString(k) {
				t.Errorf("%s: key %q (at %s) is not lowerCamel", name, k, paths[0])
			}
			lower := strings.ToLower(k)
			if spellings[lower] == nil {
				spellings[lower] = map[string]string{}
			}
			spellings[lower][k] = name
		}
	}
	for _, s := range spellings {
		if len(s) > 1 {
			t.Errorf("one key, several spellings: %v", s)
		}
	}
	// A group: the same keys in plan's details and explain's groups.
	group := []string{"cap", "ceiling", "desired", "floor", "key", "leftOut", "nodePool"}
	for name, path := range map[string]string{
		"plan": ".details[]", "plan -f": ".workloads[].details[]", "explain deployment": ".groups[]",
		"explain pod": ".workload.groups[]", "status": "[].groups[]",
	} {
		keys := objectKeys(keysOf[name], path)
		for _, k := range group {
			if !slices.Contains(keys, k) {
				t.Errorf("%s: a group (%s) lacks %q: %v", name, path, k, keys)
			}
		}
	}
	// A strategy's max=N is a cap: no key says max (nor min) for
	// something else, a share's ceiling.
	for name, keys := range keysOf {
		for _, k := range []string{"max", "min"} {
			if len(keys[k]) > 0 {
				t.Errorf("%s: key %q at %v: a share's bounds are floor and ceiling, a cap is cap", name, k, keys[k])
			}
		}
	}
	// Why a workload is not placed.
	for name, path := range map[string]string{"plan -f": ".workloads[]", "explain bare deployment": ""} {
		if keys := objectKeys(keysOf[name], path); !slices.Contains(keys, "notPlaced") {
			t.Errorf("%s: a workload apportion does not place lacks notPlaced: %v", name, keys)
		}
	}
	// The same words for the same things elsewhere: a workload's
	// namespace, strategy, replicas, mode and where its strategy is
	// written.
	for _, k := range []string{"namespace", "strategy", "replicas", "mode", "source"} {
		var in []string
		for name, keys := range keysOf {
			if len(keys[k]) > 0 {
				in = append(in, name)
			}
		}
		if len(in) < 2 {
			t.Errorf("%q in %v only", k, in)
		}
	}
}

// cappedStrategy has a capped group, a group served by a NodePool and a
// group no NodePool serves (reserved).
const cappedStrategy = "karpenter.sh/capacity-type=on-demand,weight=1,max=2:karpenter.sh/capacity-type=spot,weight=3:karpenter.sh/capacity-type=reserved,weight=1"

func metav1ObjectMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}
