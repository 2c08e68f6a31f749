package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
)

// Manifests are the objects of a set of manifests that a preview of all of
// them reads: workloads, PlacementPolicies, ClusterPlacementPolicies and
// Namespaces (for their labels). Documents of other kinds are counted, not
// read: the output of helm template holds Services, ConfigMaps and more.
type Manifests struct {
	Workloads       []*Workload
	Policies        []*v1alpha1.PlacementPolicy
	ClusterPolicies []*v1alpha1.ClusterPlacementPolicy
	// Namespaces are the labels of each namespace, by name: from its
	// Namespace document, or given by the caller in its place.
	Namespaces map[string]map[string]string
	// Skipped counts the documents of other kinds, by kind.
	Skipped map[string]int

	// namespace is the namespace of objects that name none.
	namespace string
	// seen says where each object was read, "Kind namespace/name" ->
	// where, so that one given twice is an error rather than a guess.
	seen map[string]string
}

// NewManifests returns an empty set; objects that name no namespace are in
// namespace, as kubectl apply puts them.
func NewManifests(namespace string) *Manifests {
	return &Manifests{Namespaces: map[string]map[string]string{}, Skipped: map[string]int{}, namespace: namespace, seen: map[string]string{}}
}

// ReadPath reads a file or, for a directory, every *.yaml, *.yml and *.json
// file under it, subdirectories included, in lexical order.
func (m *Manifests) ReadPath(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return m.readFile(path)
	}
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			if d.Type().IsRegular() {
				return m.readFile(p)
			}
		}
		return nil
	})
}

func (m *Manifests) readFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	return m.Read(f, path)
}

// Read adds the documents of a YAML or JSON stream (several documents, and
// the items of List kinds); name names the stream in errors, which give the
// document's index (from 1).
func (m *Manifests) Read(r io.Reader, name string) error {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return nil
		}
		where := fmt.Sprintf("%s: document %d", name, doc)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if err := m.add(raw, where); err != nil {
			return err
		}
	}
}

// add reads one document.
func (m *Manifests) add(raw json.RawMessage, where string) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		// An empty document: "---" twice, or comments alone.
		return nil
	}
	var head struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	switch {
	case strings.HasSuffix(head.Kind, "List") && head.Items != nil:
		for i, item := range head.Items {
			if err := m.add(item, fmt.Sprintf("%s, item %d", where, i+1)); err != nil {
				return err
			}
		}
		return nil
	case workloadKinds[head.Kind] != "" && strings.HasPrefix(head.APIVersion, workloadKinds[head.Kind]+"/"):
		return m.addWorkload(raw, where, head.Kind)
	case head.APIVersion == v1alpha1.GroupVersion.String() && head.Kind == v1alpha1.PlacementPolicyGVK.Kind:
		p := &v1alpha1.PlacementPolicy{}
		if err := decode(raw, where, head.Kind, p); err != nil {
			return err
		}
		p.Namespace = m.namespaceOr(p.Namespace)
		m.Policies = append(m.Policies, p)
		return m.once(head.Kind, p.Namespace, p.Name, where)
	case head.APIVersion == v1alpha1.GroupVersion.String() && head.Kind == v1alpha1.ClusterPlacementPolicyGVK.Kind:
		p := &v1alpha1.ClusterPlacementPolicy{}
		if err := decode(raw, where, head.Kind, p); err != nil {
			return err
		}
		m.ClusterPolicies = append(m.ClusterPolicies, p)
		return m.once(head.Kind, "", p.Name, where)
	case head.APIVersion == "v1" && head.Kind == "Namespace":
		var ns struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := decode(raw, where, head.Kind, &ns); err != nil {
			return err
		}
		m.Namespaces[ns.Metadata.Name] = ns.Metadata.Labels
		return m.once(head.Kind, "", ns.Metadata.Name, where)
	default:
		kind := head.Kind
		if kind == "" {
			kind = "(no kind)"
		}
		m.Skipped[kind]++
	}
	return nil
}

// addWorkload reads a Deployment, StatefulSet, ReplicaSet, Rollout, Job,
// CronJob or Workflow.
func (m *Manifests) addWorkload(raw json.RawMessage, where, kind string) error {
	var doc manifest
	if err := decode(raw, where, kind, &doc); err != nil {
		return err
	}
	w := doc.workload(m.namespaceOr(doc.Metadata.Namespace))
	m.Workloads = append(m.Workloads, w)
	return m.once(w.Kind, w.Namespace, w.Name, where)
}

// decode reads a document of kind into v; its errors name the document.
func decode(raw json.RawMessage, where, kind string, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %s: %w", where, kind, err)
	}
	return nil
}

func (m *Manifests) namespaceOr(ns string) string {
	if ns == "" {
		return m.namespace
	}
	return ns
}

// once records an object, and refuses it the second time.
func (m *Manifests) once(kind, namespace, name, where string) error {
	if name == "" {
		return fmt.Errorf("%s: %s without metadata.name", where, kind)
	}
	key := kind + " " + name
	if namespace != "" {
		key = kind + " " + namespace + "/" + name
	}
	if first, ok := m.seen[key]; ok {
		return fmt.Errorf("%s: %s again (first in %s)", where, key, first)
	}
	m.seen[key] = where
	return nil
}

// SkippedLine says in one line which documents were not read, by kind; ""
// when none was skipped.
func (m *Manifests) SkippedLine() string {
	if len(m.Skipped) == 0 {
		return ""
	}
	kinds := make([]string, 0, len(m.Skipped))
	n := 0
	for k, c := range m.Skipped {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, c))
		n += c
	}
	sort.Strings(kinds)
	docs := "documents"
	if n == 1 {
		docs = "document"
	}
	return fmt.Sprintf("skipped %d %s of kinds plan does not read: %s", n, docs, strings.Join(kinds, ", "))
}
