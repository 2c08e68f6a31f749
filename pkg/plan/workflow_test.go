package plan

import (
	"fmt"
	"strings"
	"testing"
)

// TestPreviewWorkflow: an Argo Workflow is previewed at its parallelism
// (spec.parallelism, else its fan-out template's), its strategy found on
// spec.podMetadata (which Argo copies onto each pod) before its own
// annotations, or from a PlacementPolicy targeting it.
func TestPreviewWorkflow(t *testing.T) {
	const docs = `apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: train
  namespace: ml
  annotations: {apportion.dev/strategy: "zone=x,weight=1"}
spec:
  entrypoint: fan-out
  podMetadata:
    annotations: {apportion.dev/strategy: "a=1,weight=1:b=2,weight=3"}
  templates:
    - name: fan-out
      parallelism: 8
      steps: []
    - name: shard
      container: {image: example.com/train:2}
---
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: etl
  namespace: ml
spec:
  parallelism: 4
  templates:
    - name: main
      parallelism: 10
---
apiVersion: apportion.dev/v1alpha1
kind: PlacementPolicy
metadata:
  name: etl
  namespace: ml
spec:
  target: {apiVersion: argoproj.io/v1alpha1, kind: Workflow, name: etl}
  strategy:
    text: "a=1,base=2,weight=1:b=2,weight=1"
`
	m := NewManifests("default")
	if err := m.Read(strings.NewReader(docs), "workflows.yaml"); err != nil {
		t.Fatal(err)
	}
	previews, err := m.Preview(-1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(previews) != 2 {
		t.Fatalf("%d previews, want the 2 Workflows: %+v", len(previews), previews)
	}
	for i, want := range []struct {
		id, source string
		replicas   int
		counts     map[string]int64
	}{
		{"Workflow ml/train", "Workflow train spec.podMetadata.annotations[apportion.dev/strategy]", 8, map[string]int64{"a=1": 2, "b=2": 6}},
		{"Workflow ml/etl", "PlacementPolicy ml/etl", 4, map[string]int64{"a=1": 3, "b=2": 1}},
	} {
		p := previews[i]
		if p.String() != want.id || p.Source != want.source || p.Replicas != want.replicas || p.Result == nil || fmt.Sprint(p.Counts) != fmt.Sprint(want.counts) {
			t.Errorf("preview %d: %s from %q at %d, result %+v; want %s from %q at %d, counts %v (error %q, not placed %q)",
				i, p.String(), p.Source, p.Replicas, p.Result, want.id, want.source, want.replicas, want.counts, p.Error, p.NotPlaced)
		}
	}
}
