// Package strategy parses, validates and formats the placement strategy a user
// writes on a workload:
//
//	karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3
//
// Groups are separated by ':', items inside a group by ',', and every item is
// key=value. The keys "base" and "weight" are non-negative integers (default
// 0), "max" a positive integer (default: no cap) at least the base; "min" is
// reserved, and so are keys without a "/" that look like a typo of base or
// weight (reserved.go); every other key is a node label the group requires. The package is pure:
// it imports no client and does no I/O.
//
// Parse turns the text into a Strategy of Groups (strategy.go); Find reads
// it from a workload's or its pod template's annotations, under any of
// annotations.StrategyNames, and its Source says where (find.go).
package strategy

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// KeyBase and KeyWeight are the two reserved item keys of a group.
	KeyBase   = "base"
	KeyWeight = "weight"

	// MaxGroups bounds the number of groups so that group sets fit a 64-bit
	// mask in the apportioning engine.
	MaxGroups = 64
	// MaxValue is the largest base or weight accepted: the replica count of a
	// workload is an int32, and the engine's exact integer arithmetic relies
	// on this bound.
	MaxValue = 1<<31 - 1
	// MaxWeightSum is the largest sum of the weights in lowest terms
	// (divided by their greatest common divisor). Past the bases the split
	// repeats every that many replicas, and the engine reaches the split at
	// any replica count by stepping through at most one such cycle: the
	// bound keeps that work small for every strategy, whoever writes it.
	// 1:3, 80:20 and shares in basis points (summing to 10000) all fit.
	MaxWeightSum = 10_000
)

// Label is one node label a group requires.
type Label struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (l Label) String() string { return l.Key + "=" + l.Value }

// Group is one share of the strategy: pods of the group must land on nodes
// carrying all of Labels. Max caps the pods the group holds (0: no cap).
type Group struct {
	Labels []Label `json:"labels"`
	Base   int32   `json:"base"`
	Weight int32   `json:"weight"`
	Max    int32   `json:"max,omitempty"`
}

// Key identifies the group: its labels as key=value joined by ',', in the
// order they were written. It is what `apportion plan` prints and what the
// webhook writes into the apportion.dev/group annotation.
func (g Group) Key() string {
	parts := make([]string, len(g.Labels))
	for i, l := range g.Labels {
		parts[i] = l.String()
	}
	return strings.Join(parts, ",")
}

// LabelKeys returns the keys of the group's labels, in written order.
func (g Group) LabelKeys() []string {
	keys := make([]string, len(g.Labels))
	for i, l := range g.Labels {
		keys[i] = l.Key
	}
	return keys
}

// Selector returns the group's labels as a map, for matching nodes.
func (g Group) Selector() map[string]string {
	m := make(map[string]string, len(g.Labels))
	for _, l := range g.Labels {
		m[l.Key] = l.Value
	}
	return m
}

// Strategy is a parsed, valid strategy.
type Strategy struct {
	Groups []Group `json:"groups"`
}

// Keys returns the key of every group, in strategy order.
func (s *Strategy) Keys() []string {
	keys := make([]string, len(s.Groups))
	for i, g := range s.Groups {
		keys[i] = g.Key()
	}
	return keys
}

// String formats the strategy in canonical form: labels in written order,
// then base, weight and max when they are not zero. Parse(s.String()) yields a
// strategy equal to s.
func (s *Strategy) String() string {
	groups := make([]string, len(s.Groups))
	for i, g := range s.Groups {
		items := make([]string, 0, len(g.Labels)+3)
		for _, l := range g.Labels {
			items = append(items, l.String())
		}
		if g.Base != 0 {
			items = append(items, KeyBase+"="+strconv.Itoa(int(g.Base)))
		}
		if g.Weight != 0 {
			items = append(items, KeyWeight+"="+strconv.Itoa(int(g.Weight)))
		}
		if g.Max != 0 {
			items = append(items, KeyMax+"="+strconv.Itoa(int(g.Max)))
		}
		groups[i] = strings.Join(items, ",")
	}
	return strings.Join(groups, ":")
}

// Error is a fault in a strategy string. Group and Item are 1-based; zero
// means the fault is not about one group (or one item).
type Error struct {
	Group  int
	Item   int
	Text   string // the offending item as written, when Item > 0
	Reason string
}

func (e *Error) Error() string {
	switch {
	case e.Group == 0:
		return "invalid strategy: " + e.Reason
	case e.Item == 0:
		return fmt.Sprintf("invalid strategy: group %d: %s", e.Group, e.Reason)
	default:
		return fmt.Sprintf("invalid strategy: group %d, item %d %q: %s", e.Group, e.Item, e.Text, e.Reason)
	}
}

// Parse parses and validates a strategy string. The error, when not nil, is an
// *Error naming the group, the item and the reason.
func Parse(s string) (*Strategy, error) {
	if strings.TrimSpace(s) == "" {
		return nil, &Error{Reason: "strategy is empty"}
	}
	rawGroups := strings.Split(s, ":")
	if len(rawGroups) > MaxGroups {
		return nil, &Error{Reason: fmt.Sprintf("%d groups, at most %d are allowed", len(rawGroups), MaxGroups)}
	}
	st := &Strategy{Groups: make([]Group, 0, len(rawGroups))}
	seen := make(map[string]int, len(rawGroups)) // label-set identity -> group number
	anyWeight := false
	for gi, raw := range rawGroups {
		g, err := parseGroup(gi+1, raw)
		if err != nil {
			return nil, err
		}
		id := labelSetID(g.Labels)
		if prev, dup := seen[id]; dup {
			return nil, &Error{Group: gi + 1, Reason: fmt.Sprintf("same node labels as group %d (%s)", prev, g.Key())}
		}
		seen[id] = gi + 1
		anyWeight = anyWeight || g.Weight > 0
		st.Groups = append(st.Groups, g)
	}
	if !anyWeight {
		return nil, &Error{Reason: "every group has weight 0: at least one group needs a positive weight"}
	}
	if sum, gcd := weightSum(st.Groups); sum/gcd > MaxWeightSum {
		reason := fmt.Sprintf("the weights add up to %d", sum)
		if gcd > 1 {
			reason += fmt.Sprintf(", %d in lowest terms", sum/gcd)
		}
		return nil, &Error{Reason: fmt.Sprintf("%s; at most %d is allowed: write the same proportions with smaller numbers", reason, MaxWeightSum)}
	}
	return st, nil
}

// weightSum returns the sum of the groups' weights and their greatest common
// divisor (0 when every weight is 0).
func weightSum(groups []Group) (sum, gcd int64) {
	for _, g := range groups {
		w := int64(g.Weight)
		sum += w
		for w != 0 {
			gcd, w = w, gcd%w
		}
	}
	return sum, gcd
}

func parseGroup(num int, raw string) (Group, error) {
	var g Group
	if strings.TrimSpace(raw) == "" {
		return g, &Error{Group: num, Reason: "group is empty"}
	}
	keys := make(map[string]bool)
	for ii, item := range strings.Split(raw, ",") {
		fault := func(reason string) error {
			return &Error{Group: num, Item: ii + 1, Text: strings.TrimSpace(item), Reason: reason}
		}
		text := strings.TrimSpace(item)
		if text == "" {
			return g, fault("item is empty")
		}
		k, v, ok := strings.Cut(text, "=")
		if !ok {
			return g, fault("item must be key=value")
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "" {
			return g, fault("key is empty")
		}
		if keys[k] {
			return g, fault(fmt.Sprintf("key %q appears twice in the group", k))
		}
		keys[k] = true
		switch k {
		case KeyBase, KeyWeight, KeyMax:
			n, err := parseCount(v)
			if err != nil {
				reason := fmt.Sprintf("%s %s", k, err)
				if k == KeyWeight {
					reason += ratioHint(v)
				}
				return g, fault(reason)
			}
			switch k {
			case KeyBase:
				g.Base = n
			case KeyWeight:
				g.Weight = n
			default:
				if n == 0 {
					return g, fault("max must be at least 1: a group that takes no pod is a group to remove")
				}
				g.Max = n
			}
		default:
			if reason := KeyFault(k); reason != "" {
				return g, fault(reason)
			}
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				return g, fault("invalid node label key: " + strings.Join(errs, "; "))
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				return g, fault("invalid node label value: " + strings.Join(errs, "; "))
			}
			g.Labels = append(g.Labels, Label{Key: k, Value: v})
		}
	}
	if len(g.Labels) == 0 {
		return g, &Error{Group: num, Reason: "group has no node label (only base/weight/max)"}
	}
	if reason := CapFault(g.Base, g.Max); reason != "" {
		return g, &Error{Group: num, Reason: reason}
	}
	return g, nil
}

// CapFault is why a group may not have base and cap maxPods (0: no cap),
// "" when it may: a base is the pods a group gets first, so it cannot be
// more than the most it may hold.
func CapFault(base, maxPods int32) string {
	if maxPods != 0 && base > maxPods {
		return fmt.Sprintf("base %d is more than max %d: the group can never hold its base", base, maxPods)
	}
	return ""
}

// parseCount accepts decimal digits only: no sign, no spaces inside, no
// exponent, so that "1e3" or "-0" are reported rather than guessed at.
func parseCount(v string) (int32, error) {
	if v == "" {
		return 0, fmt.Errorf("must be a non-negative integer, got an empty value")
	}
	for _, r := range v {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("must be a non-negative integer, got %q", v)
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > MaxValue {
		return 0, fmt.Errorf("must be at most %d, got %q", MaxValue, v)
	}
	return int32(n), nil
}

// ratioHint explains a weight written as a percentage ("25%") or as a
// fraction ("0.25"): weights are ratios, and the hint shows the item to
// write instead. "" when v is neither.
func ratioHint(v string) string {
	const hint = ": weights are ratios, not %s; write %s=%s"
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		if _, err := parseCount(strings.TrimSpace(pct)); err == nil {
			return fmt.Sprintf(hint, "percentages", KeyWeight, strings.TrimSpace(pct))
		}
		return ""
	}
	// A fraction below 1 reads as a share of 100: 0.25 -> 25.
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !strings.Contains(v, ".") || f <= 0 || f >= 1 {
		return ""
	}
	if pct := f * 100; pct == math.Trunc(pct) {
		return fmt.Sprintf(hint, "fractions", KeyWeight, strconv.Itoa(int(pct)))
	}
	return ""
}

// labelSetID is order-insensitive: "a=1,b=2" and "b=2,a=1" are the same nodes.
func labelSetID(labels []Label) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = l.String()
	}
	sort.Strings(parts)
	return strings.Join(parts, "\x00")
}
