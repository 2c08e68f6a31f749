package plan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/apportion-dev/apportion/pkg/workload"
)

// workloadKinds are the kinds a strategy may be written on, by API group.
var workloadKinds = map[string]string{
	"Deployment":  "apps",
	"StatefulSet": "apps",
	"ReplicaSet":  "apps",
	"Rollout":     "argoproj.io",
	"Job":         "batch",
	"CronJob":     "batch",
	"Workflow":    "argoproj.io",
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
	// Replicas is spec.replicas, nil when the manifest leaves it out; a
	// Job's spec.parallelism (its live pods at most), a CronJob's Jobs'; a
	// Workflow's spec.parallelism, else the largest of its templates'.
	Replicas *int32
	// JobLabels and JobAnnotations are a CronJob's
	// spec.jobTemplate.metadata, which each of its Jobs gets.
	JobLabels, JobAnnotations map[string]string
	// Strategy is the strategy written on the workload, and Source where
	// ("" without one).
	Strategy, Source string
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

// manifest is the part of a workload manifest a preview reads: a
// Deployment, StatefulSet, ReplicaSet, Rollout or Job (spec.template), or a
// CronJob (spec.jobTemplate).
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
		Replicas    *int32                 `json:"replicas"`
		Parallelism *int32                 `json:"parallelism"`
		Template    corev1.PodTemplateSpec `json:"template"`
		JobTemplate struct {
			Metadata struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				Parallelism *int32                 `json:"parallelism"`
				Template    corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"`
		// An Argo Workflow's: what Argo copies onto each pod, and how
		// many pods run at once.
		PodMetadata struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"podMetadata"`
		NodeSelector map[string]string   `json:"nodeSelector"`
		Tolerations  []corev1.Toleration `json:"tolerations"`
		Affinity     *corev1.Affinity    `json:"affinity"`
		Templates    []struct {
			Parallelism *int64 `json:"parallelism"`
		} `json:"templates"`
	} `json:"spec"`
}

// workflowParallelism is a Workflow's spec.parallelism, else the largest
// parallelism of its templates (a fan-out's), nil when none is set.
func (m *manifest) workflowParallelism() *int32 {
	if m.Spec.Parallelism != nil {
		return m.Spec.Parallelism
	}
	var largest *int32
	for _, t := range m.Spec.Templates {
		if t.Parallelism != nil && (largest == nil || int64(*largest) < *t.Parallelism) {
			largest = ptr.To(int32(min(*t.Parallelism, math.MaxInt32)))
		}
	}
	return largest
}

// workload is m as a Workload in namespace.
func (m *manifest) workload(namespace string) *Workload {
	w := &Workload{Kind: m.Kind, Namespace: namespace, Name: m.Metadata.Name,
		Labels: m.Metadata.Labels, Annotations: m.Metadata.Annotations, Replicas: m.Spec.Replicas, Template: m.Spec.Template}
	switch m.Kind {
	case "Job":
		w.Replicas = m.Spec.Parallelism
	case "CronJob":
		w.Replicas, w.Template = m.Spec.JobTemplate.Spec.Parallelism, m.Spec.JobTemplate.Spec.Template
		w.JobLabels, w.JobAnnotations = m.Spec.JobTemplate.Metadata.Labels, m.Spec.JobTemplate.Metadata.Annotations
	case "Workflow":
		// Argo's pods carry spec.podMetadata, and the Workflow's
		// scheduling fields, on each template's pod spec.
		w.Replicas = m.workflowParallelism()
		w.Template = corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: m.Spec.PodMetadata.Labels, Annotations: m.Spec.PodMetadata.Annotations},
			Spec: corev1.PodSpec{NodeSelector: m.Spec.NodeSelector, Tolerations: m.Spec.Tolerations, Affinity: m.Spec.Affinity}}
	}
	// Its own strategy, found as the webhook finds it.
	chain := w.Chain("")
	if info, err := workload.ResolveChain(context.Background(), namespace, chain); err == nil && info.Found {
		w.Strategy, w.Source = info.Strategy, workload.DescribeSource(&chain, info.Source)
	}
	return w
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
		w := m.workload(m.Metadata.Namespace)
		if w.Source == "" {
			without = append(without, w.String())
			continue
		}
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
		return nil, errors.New("no Deployment, StatefulSet, ReplicaSet, Argo Rollout, Job or CronJob in the input")
	}
}
