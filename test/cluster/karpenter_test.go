package cluster

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// stagesSample is shaped like build.sh's stages.yaml: documents joined by
// "---", each after a comment naming its source.
const stagesSample = `---
# from sigs.k8s.io/kwok@v0.8.0 kustomize/stage/node/fast/node-initialize.yaml
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values:
      - 'True'
  next:
    statusTemplate: |
      phase: Running
---
# from sigs.k8s.io/kwok@v0.8.0 kustomize/stage/pod/fast/pod-ready.yaml
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Pending'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      phase: Running
---
# from sigs.k8s.io/kwok@v0.8.0 kustomize/stage/pod/fast/pod-complete.yaml
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
  next:
    statusTemplate: |
      phase: Succeeded
---
# from sigs.k8s.io/kwok@v0.8.0 kustomize/stage/pod/fast/pod-delete.yaml
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    delete: true
`

func TestKwokConfigKeepsProcessPodsOutOfPodStages(t *testing.T) {
	out, err := kwokConfig([]byte(stagesSample))
	if err != nil {
		t.Fatal(err)
	}
	in := decodeStages(t, []byte(stagesSample))
	got := decodeStages(t, out)
	if len(got) != len(in) {
		t.Fatalf("got %d stages, want %d:\n%s", len(got), len(in), out)
	}
	want := map[string]any{"key": `.metadata.labels["e2e.apportion.dev/process"]`, "operator": "DoesNotExist"}
	for name, stage := range got {
		before, _, _ := unstructured.NestedSlice(in[name].Object, "spec", "selector", "matchExpressions")
		after, _, _ := unstructured.NestedSlice(stage.Object, "spec", "selector", "matchExpressions")
		switch name {
		case "pod-ready", "pod-complete", "pod-delete":
			if len(after) != len(before)+1 || fmt.Sprint(after[len(after)-1]) != fmt.Sprint(want) {
				t.Errorf("stage %s: matchExpressions %v, want %v and then %v", name, after, before, want)
			}
		default:
			if fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("stage %s changed: matchExpressions %v, was %v", name, after, before)
			}
		}
		// The rest, the templates above all, is left as it was.
		_ = unstructured.SetNestedSlice(stage.Object, before, "spec", "selector", "matchExpressions")
		if a, b := mustYAML(t, stage.Object), mustYAML(t, in[name].Object); a != b {
			t.Errorf("stage %s changed beyond its selector:\n%s\nwas:\n%s", name, a, b)
		}
	}
}

func TestKwokConfigNeedsTheStagesItPatches(t *testing.T) {
	i := strings.Index(stagesSample, "---\n# from sigs.k8s.io/kwok@v0.8.0 kustomize/stage/pod/fast/pod-complete.yaml")
	j := strings.Index(stagesSample, "---\n# from sigs.k8s.io/kwok@v0.8.0 kustomize/stage/pod/fast/pod-delete.yaml")
	_, err := kwokConfig([]byte(stagesSample[:i] + stagesSample[j:]))
	if err == nil || !strings.Contains(err.Error(), "pod-complete") {
		t.Errorf("without a pod-complete stage: error %v, want one naming pod-complete", err)
	}
	_, err = kwokConfig([]byte(stagesSample[:j]))
	if err == nil || !strings.Contains(err.Error(), "pod-delete") {
		t.Errorf("without a pod-delete stage: error %v, want one naming pod-delete", err)
	}
}

func decodeStages(t *testing.T, data []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	stages := map[string]*unstructured.Unstructured{}
	r := utilyaml.NewYAMLReader(bufioReader(data))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		obj := map[string]any{}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("decoding %q: %v", doc, err)
		}
		if len(obj) > 0 {
			u := &unstructured.Unstructured{Object: obj}
			stages[u.GetName()] = u
		}
	}
	return stages
}

func mustYAML(t *testing.T, obj any) string {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
