// Package policy reads PlacementPolicies and ClusterPlacementPolicies: the
// strategy a policy states in any of its three forms as one canonical
// string, which policy places a workload (Source, over the manager's
// cache), the status engine both status controllers share (Observer: the
// workloads a policy targets or covers, what places each as
// workload.ResolveChain answers, their replicas and Running pods), and the
// status a policy reports (Status, a pure function of what was observed;
// ClusterStatus).
package policy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Strategy returns the policy's strategy in the string syntax of the
// apportion.dev/strategy annotation, canonical (strategy.Parse then String)
// so that caches keyed on it see one text per strategy whatever form it was
// written in. Structured groups and distribution entries name their labels
// in a map: they are written in key order. When the strategy is invalid, raw
// is the text as built (for the placement controller to report again) and
// err carries the parser's message, prefixed with the field it comes from.
func Strategy(spec *v1alpha1.PlacementPolicySpec) (raw string, err error) {
	var field string
	switch {
	case spec.Strategy != nil && len(spec.Distribution) > 0:
		return "", errors.New("spec: exactly one of strategy and distribution must be set")
	case len(spec.Distribution) > 0:
		field = "spec.distribution"
		groups := make([]v1alpha1.Group, len(spec.Distribution))
		for i, d := range spec.Distribution {
			groups[i] = v1alpha1.Group{Labels: d.NodeLabel, Weight: d.Weight}
		}
		if raw, err = join(field, "nodeLabel", groups); err != nil {
			return raw, err
		}
	case spec.Strategy == nil:
		return "", errors.New("spec: exactly one of strategy and distribution must be set")
	case len(spec.Strategy.Groups) > 0 && spec.Strategy.Text != "":
		return "", errors.New("spec.strategy: exactly one of groups and text must be set")
	case len(spec.Strategy.Groups) > 0:
		field = "spec.strategy.groups"
		if raw, err = join(field, "labels", spec.Strategy.Groups); err != nil {
			return raw, err
		}
	default:
		field, raw = "spec.strategy.text", spec.Strategy.Text
	}
	s, err := strategy.Parse(raw)
	if err != nil {
		var se *strategy.Error
		if field != "spec.strategy.text" && errors.As(err, &se) && se.Group > 0 {
			// Group n of the built text is entry n-1 of the list.
			return raw, fmt.Errorf("%s[%d]: %w", field, se.Group-1, err)
		}
		return raw, fmt.Errorf("%s: %w", field, err)
	}
	return s.String(), nil
}

// join writes structured groups in the string syntax. A key or value holding
// one of the syntax's separators could not be read back group by group, and
// is no valid label anyway: it is reported here, with the validator's words.
func join(field, labelsField string, groups []v1alpha1.Group) (string, error) {
	parts := make([]string, len(groups))
	for i, g := range groups {
		keys := make([]string, 0, len(g.Labels))
		for k := range g.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		items := make([]string, 0, len(keys)+3)
		for _, k := range keys {
			v := g.Labels[k]
			at := fmt.Sprintf("%s[%d].%s[%q]", field, i, labelsField, k)
			// Written as an item, "base" would be read back as the
			// group's base, and a typo of it as a label no node has.
			if reason := strategy.KeyFault(k); reason != "" {
				return "", fmt.Errorf("%s: %s", at, reason)
			}
			if strings.ContainsAny(k, ",:=") {
				return "", fmt.Errorf("%s: invalid node label key: %s", at, strings.Join(validation.IsQualifiedName(k), "; "))
			}
			if strings.ContainsAny(v, ",:=") {
				return "", fmt.Errorf("%s: invalid node label value: %s", at, strings.Join(validation.IsValidLabelValue(v), "; "))
			}
			items = append(items, k+"="+v)
		}
		if g.Base < 0 || g.Weight < 0 {
			return "", fmt.Errorf("%s[%d]: base and weight must be non-negative integers, got base %d, weight %d", field, i, g.Base, g.Weight)
		}
		if g.Max != nil && *g.Max < 1 {
			return "", fmt.Errorf("%s[%d]: max must be a positive integer, got %d (leave it out for no cap)", field, i, *g.Max)
		}
		if g.Base != 0 {
			items = append(items, strategy.KeyBase+"="+strconv.Itoa(int(g.Base)))
		}
		if g.Weight != 0 {
			items = append(items, strategy.KeyWeight+"="+strconv.Itoa(int(g.Weight)))
		}
		if g.Max != nil {
			items = append(items, strategy.KeyMax+"="+strconv.Itoa(int(*g.Max)))
		}
		parts[i] = strings.Join(items, ",")
	}
	return strings.Join(parts, ":"), nil
}
