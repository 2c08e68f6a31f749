package plan

import (
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/apportion-dev/apportion/pkg/strategy"
)

// workloadKinds are the kinds a strategy may be written on, by API group.
var workloadKinds = map[string]string{
	"Deployment":  "apps",
	"StatefulSet": "apps",
	"ReplicaSet":  "apps",
	"Rollout":     "argoproj.io",
}

// Workload is what a preview needs from a workload manifest.
type Workload struct {
	Kind      string
	Namespace string
	Name      string
	// Labels and Annotations are the workload's own: policies select
	// workloads by their labels.
	Labels      map[string]string
	Annotations map[string]string
	// Replicas is spec.replicas, nil when the manifest leaves it out.
	Replicas *int32
	Strategy string
	Source   strategy.Source
	// Template is the pod template, for NodePool selection.
	Template corev1.PodTemplateSpec
}

func (w *Workload) String() string {
	ns := w.Namespace
	if ns == "" {
		ns = "default"
	}
	return fmt.Sprintf("%s %s/%s", w.Kind, ns, w.Name)
}

// manifest is the part of a Deployment, StatefulSet, ReplicaSet or Rollout a
// preview reads; the four kinds agree on these fields.
type manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Replicas *int32                 `json:"replicas"`
		Template corev1.PodTemplateSpec `json:"template"`
	} `json:"spec"`
}

// ReadWorkload reads a YAML or JSON stream (one or more documents) and returns
// the one workload that carries a strategy. Documents of other kinds are
// ignored; zero or several workloads with a strategy is an error.
func ReadWorkload(r io.Reader) (*Workload, error) {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	var found []*Workload
	var without []string
	for doc := 1; ; doc++ {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading document %d: %w", doc, err)
		}
		group, ok := workloadKinds[m.Kind]
		if !ok || !strings.HasPrefix(m.APIVersion, group+"/") {
			continue
		}
		w := &Workload{Kind: m.Kind, Namespace: m.Metadata.Namespace, Name: m.Metadata.Name, Replicas: m.Spec.Replicas, Template: m.Spec.Template}
		value, src, ok := strategy.Find(m.Metadata.Annotations, m.Spec.Template.Annotations)
		if !ok {
			without = append(without, w.String())
			continue
		}
		w.Strategy, w.Source = value, src
		found = append(found, w)
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		names := make([]string, len(found))
		for i, w := range found {
			names[i] = w.String()
		}
		return nil, fmt.Errorf("%d workloads carry a strategy (%s): give one per file", len(found), strings.Join(names, ", "))
	case len(without) > 0:
		return nil, fmt.Errorf("no strategy annotation on %s (looked for apportion.dev/strategy, custom-pod-schedule-strategy, CustomPodScheduleStrategy on the workload and its pod template)", strings.Join(without, ", "))
	default:
		return nil, errors.New("no Deployment, StatefulSet, ReplicaSet or Argo Rollout in the input")
	}
}
