package decision

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ArchitectureRule is what a pod gains, in node-label mode, when its images
// run on an architecture: the taints to tolerate and the node labels to
// require. The shape is the architectures setting of the Kubernetes
// architecture webhook design (kube-arch-webhook): taintsToTolerate and
// requireNodeLabels.
type ArchitectureRule struct {
	// TaintsToTolerate become tolerations of the pod.
	TaintsToTolerate []corev1.Toleration `json:"taintsToTolerate,omitempty"`
	// RequireNodeLabels are ANDed into every required node selector term.
	RequireNodeLabels NodeLabels `json:"requireNodeLabels,omitempty"`
}

// NodeLabels are required node labels. In JSON they are an object, or, as
// in the kube-arch-webhook design, a list of objects that are merged.
type NodeLabels map[string]string

// UnmarshalJSON reads an object or a list of objects.
func (l *NodeLabels) UnmarshalJSON(raw []byte) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var list []map[string]string
		if err := json.Unmarshal(raw, &list); err != nil {
			return err
		}
		out := NodeLabels{}
		for _, m := range list {
			for k, v := range m {
				if old, ok := out[k]; ok && old != v {
					return fmt.Errorf("label %s is required as both %q and %q", k, old, v)
				}
				out[k] = v
			}
		}
		*l = out
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	*l = m
	return nil
}

// ArchitectureRules are the rules by architecture (kubernetes.io/arch
// value, such as arm64).
type ArchitectureRules map[string]ArchitectureRule

// ParseArchitectureRules reads the JSON of --architecture-rules, e.g.
// {"arm64":{"taintsToTolerate":[{"key":"arch","value":"arm64","effect":"NoSchedule"}],
// "requireNodeLabels":{"node-group":"graviton"}}}. Empty text is no rule.
// Unknown fields, invalid tolerations or labels, and a label two
// architectures require with different values (a pod whose images run on
// both could then run nowhere) are errors.
func ParseArchitectureRules(text string) (ArchitectureRules, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	var rules ArchitectureRules
	if err := dec.Decode(&rules); err != nil {
		return nil, fmt.Errorf("not a JSON object of architectures to {taintsToTolerate, requireNodeLabels}: %w", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	var errs []error
	type requirer struct{ arch, value string }
	required := map[string]requirer{} // label -> the first architecture requiring it
	for _, arch := range slices.Sorted(maps.Keys(rules)) {
		rule := rules[arch]
		if problems := validation.IsValidLabelValue(arch); arch == "" || len(problems) > 0 {
			errs = append(errs, fmt.Errorf("%q is not an architecture (a kubernetes.io/arch value such as arm64)", arch))
			continue
		}
		for i, t := range rule.TaintsToTolerate {
			if err := checkToleration(t); err != nil {
				errs = append(errs, fmt.Errorf("%s: taintsToTolerate[%d]: %w", arch, i, err))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(rule.RequireNodeLabels)) {
			v := rule.RequireNodeLabels[k]
			if problems := validation.IsQualifiedName(k); len(problems) > 0 {
				errs = append(errs, fmt.Errorf("%s: requireNodeLabels: %q is not a label key: %s", arch, k, strings.Join(problems, "; ")))
				continue
			}
			if problems := validation.IsValidLabelValue(v); len(problems) > 0 {
				errs = append(errs, fmt.Errorf("%s: requireNodeLabels: %s=%q is not a label value: %s", arch, k, v, strings.Join(problems, "; ")))
				continue
			}
			if first, ok := required[k]; ok && first.value != v {
				errs = append(errs, fmt.Errorf("%s requires %s=%s but %s requires %s=%s: a pod whose images run on both could run nowhere",
					arch, k, v, first.arch, k, first.value))
				continue
			}
			required[k] = requirer{arch, v}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rules, nil
}

// checkToleration checks what the API server would reject in a pod, so that
// a bad rule stops apportion at start rather than every pod's patch.
func checkToleration(t corev1.Toleration) error {
	if t.Key != "" {
		if problems := validation.IsQualifiedName(t.Key); len(problems) > 0 {
			return fmt.Errorf("key %q: %s", t.Key, strings.Join(problems, "; "))
		}
	}
	switch t.Operator {
	case corev1.TolerationOpEqual, "":
		if t.Key == "" {
			return errors.New("an empty key needs operator Exists")
		}
		if problems := validation.IsValidLabelValue(t.Value); len(problems) > 0 {
			return fmt.Errorf("value %q: %s", t.Value, strings.Join(problems, "; "))
		}
	case corev1.TolerationOpExists:
		if t.Value != "" {
			return fmt.Errorf("operator Exists takes no value, got %q", t.Value)
		}
	default:
		return fmt.Errorf("operator must be Equal or Exists, got %q", t.Operator)
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return fmt.Errorf("effect must be NoSchedule, PreferNoSchedule or NoExecute (or empty: all), got %q", t.Effect)
	}
	if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
		return errors.New("tolerationSeconds needs effect NoExecute")
	}
	return nil
}

// For is what a pod whose decision allows archs gains: the tolerations of
// those architectures' rules (without repeats) and their required labels
// (nil when none). Architectures without a rule add nothing.
func (r ArchitectureRules) For(archs []string) ([]corev1.Toleration, map[string]string) {
	var tolerations []corev1.Toleration
	var labels map[string]string
	for _, arch := range archs {
		rule, ok := r[arch]
		if !ok {
			continue
		}
		for _, t := range rule.TaintsToTolerate {
			if !slices.ContainsFunc(tolerations, func(have corev1.Toleration) bool { return sameToleration(have, t) }) {
				tolerations = append(tolerations, t)
			}
		}
		for k, v := range rule.RequireNodeLabels {
			if labels == nil {
				labels = map[string]string{}
			}
			labels[k] = v
		}
	}
	return tolerations, labels
}

func sameToleration(a, b corev1.Toleration) bool {
	if (a.TolerationSeconds == nil) != (b.TolerationSeconds == nil) ||
		(a.TolerationSeconds != nil && *a.TolerationSeconds != *b.TolerationSeconds) {
		return false
	}
	a.TolerationSeconds, b.TolerationSeconds = nil, nil
	return a == b
}
