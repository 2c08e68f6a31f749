package strategy

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

func TestParseSeeds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Strategy
	}{{
		in: "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3",
		want: Strategy{Groups: []Group{
			{Labels: []Label{{"karpenter.sh/capacity-type", "on-demand"}}, Base: 2, Weight: 1},
			{Labels: []Label{{"karpenter.sh/capacity-type", "spot"}}, Weight: 3},
		}},
	}, {
		in: "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1",
		want: Strategy{Groups: []Group{
			{Labels: []Label{{"nodesize", "od4vcpu16gb"}}, Base: 1},
			{Labels: []Label{{"nodesize", "spot4vcpu16gb"}}, Weight: 1},
			{Labels: []Label{{"nodesize", "spot8vcpu32gb"}}, Weight: 1},
		}},
	}, {
		in: "  karpenter.sh/capacity-type = spot , kubernetes.io/arch=arm64, weight = 1 : kubernetes.io/arch=amd64,weight=1 ",
		want: Strategy{Groups: []Group{
			{Labels: []Label{{"karpenter.sh/capacity-type", "spot"}, {"kubernetes.io/arch", "arm64"}}, Weight: 1},
			{Labels: []Label{{"kubernetes.io/arch", "amd64"}}, Weight: 1},
		}},
	}} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.in, err)
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, *got, tc.want)
		}
	}
}

// TestParseCaps: max=N caps a group, round-trips in canonical form (after
// base and weight), and is refused when it is 0, not a count, or below the
// group's base.
func TestParseCaps(t *testing.T) {
	in := "karpenter.sh/capacity-type=on-demand,max=3,weight=1:karpenter.sh/capacity-type=spot,weight=1"
	s, err := Parse(in)
	if err != nil {
		t.Fatalf("Parse(%q): %v", in, err)
	}
	want := Strategy{Groups: []Group{
		{Labels: []Label{{"karpenter.sh/capacity-type", "on-demand"}}, Weight: 1, Max: 3},
		{Labels: []Label{{"karpenter.sh/capacity-type", "spot"}}, Weight: 1},
	}}
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("Parse(%q) = %+v, want %+v", in, *s, want)
	}
	if got := s.String(); got != "karpenter.sh/capacity-type=on-demand,weight=1,max=3:karpenter.sh/capacity-type=spot,weight=1" {
		t.Errorf("String() = %q", got)
	}
	if _, err := Parse("a=b,base=3,max=3:c=d,weight=1"); err != nil {
		t.Errorf("a base equal to the cap: %v", err)
	}
	for _, tc := range []struct {
		in          string
		group, item int
		want        string
	}{
		{"a=b,weight=1,max=0", 1, 3, "max must be at least 1"},
		{"a=b,weight=1,max=-1", 1, 3, "max must be a non-negative integer"},
		{"a=b,weight=1,max=2.5", 1, 3, "max must be a non-negative integer"},
		{"a=b,weight=1:c=d,base=4,max=3,weight=1", 2, 0, "base 4 is more than max 3"},
		{"a=b,weight=1,max=1,max=2", 1, 4, `key "max" appears twice`},
		{"max=3,weight=1", 1, 0, "no node label"},
	} {
		_, err := Parse(tc.in)
		var perr *Error
		if !errors.As(err, &perr) {
			t.Errorf("Parse(%q) error = %v, want *Error", tc.in, err)
			continue
		}
		if perr.Group != tc.group || perr.Item != tc.item || !strings.Contains(perr.Reason, tc.want) {
			t.Errorf("Parse(%q) = group %d item %d %q, want group %d item %d reason containing %q",
				tc.in, perr.Group, perr.Item, perr.Reason, tc.group, tc.item, tc.want)
		}
	}
}

// TestWeightSumInLowestTerms: what bounds the weights is their sum once
// divided by their greatest common divisor, so large weights in a small
// proportion are accepted.
func TestWeightSumInLowestTerms(t *testing.T) {
	for _, in := range []string{
		"a=b,weight=4999:c=d,weight=5001",
		"a=b,weight=2000000000:c=d,weight=1000000000",
		"a=b,base=3,weight=2147483647:c=d",
	} {
		if _, err := Parse(in); err != nil {
			t.Errorf("Parse(%q): %v", in, err)
		}
	}
}

func TestKeysAndString(t *testing.T) {
	s, err := Parse("karpenter.sh/capacity-type=spot,kubernetes.io/arch=arm64,weight=3:karpenter.sh/capacity-type=on-demand,base=2,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Keys(), []string{"karpenter.sh/capacity-type=spot,kubernetes.io/arch=arm64", "karpenter.sh/capacity-type=on-demand"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Keys() = %q, want %q", got, want)
	}
	if got, want := s.String(), "karpenter.sh/capacity-type=spot,kubernetes.io/arch=arm64,weight=3:karpenter.sh/capacity-type=on-demand,base=2,weight=1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		in          string
		group, item int
		reason      string
	}{
		{"", 0, 0, "strategy is empty"},
		{"   ", 0, 0, "strategy is empty"},
		{"a=b,weight=1::c=d,weight=1", 2, 0, "group is empty"},
		{"a=b,weight=1: ", 2, 0, "group is empty"},
		{"base=1,weight=1", 1, 0, "no node label"},
		{"a=b,weight=1:c=d,a=e,c=f", 2, 3, `key "c" appears twice`},
		{"a=b,weight=1,weight=2", 1, 3, `key "weight" appears twice`},
		{"a=b,base=x,weight=1", 1, 2, "base must be a non-negative integer"},
		{"a=b,weight=-1", 1, 2, "weight must be a non-negative integer"},
		{"a=b,weight=1.5", 1, 2, "weight must be a non-negative integer"},
		{"a=b,weight=", 1, 2, "weight must be a non-negative integer"},
		{"a=b,weight=99999999999", 1, 2, "weight must be at most"},
		{"a=b,weight=1:c=d:a=b,weight=2", 3, 0, "same node labels as group 1"},
		{"a=b,c=d,weight=1:c=d,a=b", 2, 0, "same node labels as group 1"},
		{"a=b:c=d", 0, 0, "every group has weight 0"},
		{"a=b,weight=1:nolabel", 2, 1, "item must be key=value"},
		{"a=b,,weight=1", 1, 2, "item is empty"},
		{"=b,weight=1", 1, 1, "key is empty"},
		{"a=b,weight=1:bad key=x", 2, 1, "invalid node label key"},
		{"a=b,weight=1:k=bad value!", 2, 1, "invalid node label value"},
		{"a=b,weight=1:-x.io/y=z", 2, 1, "invalid node label key"},
		{strings.Repeat("a=b,weight=1:", MaxGroups) + "a=b,weight=1", 0, 0, "at most 64"},
		{"a=b,weight=5001:c=d,weight=5000", 0, 0, "the weights add up to 10001; at most 10000 is allowed"},
		{"a=b,weight=2147483647:c=d,weight=2147483646", 0, 0, "write the same proportions with smaller numbers"},
		{"a=b,weight=10002:c=d,weight=10000", 0, 0, "add up to 20002, 10001 in lowest terms"},
	} {
		_, err := Parse(tc.in)
		var perr *Error
		if !errors.As(err, &perr) {
			t.Errorf("Parse(%q) error = %v, want *Error", tc.in, err)
			continue
		}
		if perr.Group != tc.group || perr.Item != tc.item || !strings.Contains(perr.Reason, tc.reason) {
			t.Errorf("Parse(%q) = group %d item %d %q, want group %d item %d reason containing %q",
				tc.in, perr.Group, perr.Item, perr.Reason, tc.group, tc.item, tc.reason)
		}
		if tc.group > 0 && !strings.Contains(err.Error(), "group ") {
			t.Errorf("message %q does not name the group", err)
		}
	}
}

func TestErrorMessageNamesGroupItemAndReason(t *testing.T) {
	_, err := Parse("karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=three")
	want := `invalid strategy: group 2, item 2 "weight=three": weight must be a non-negative integer, got "three"`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

// TestWeightAsPercentageHint: a weight written as a percentage or a
// fraction is rejected with the item to write instead; other bad weights,
// and bases, get no hint.
func TestWeightAsPercentageHint(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a=b,weight=25%:c=d,weight=75%", `group 1, item 2 "weight=25%": weight must be a non-negative integer, got "25%": weights are ratios, not percentages; write weight=25`},
		{"a=b,weight=1:c=d, weight = 75 % ", `group 2, item 2 "weight = 75 %": weight must be a non-negative integer, got "75 %": weights are ratios, not percentages; write weight=75`},
		{"a=b,weight=0.25:c=d,weight=0.75", `group 1, item 2 "weight=0.25": weight must be a non-negative integer, got "0.25": weights are ratios, not fractions; write weight=25`},
		{"a=b,weight=.5", `weights are ratios, not fractions; write weight=50`},
	} {
		_, err := Parse(tc.in)
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want it to end with %s", tc.in, err, tc.want)
		}
	}
	for _, in := range []string{"a=b,weight=1.5", "a=b,weight=0.333", "a=b,weight=x%", "a=b,weight=-5%", "a=b,weight=1,base=25%", "a=b,weight=0.0"} {
		if _, err := Parse(in); err == nil || strings.Contains(err.Error(), "ratios") {
			t.Errorf("Parse(%q) = %v, want an error without the ratio hint", in, err)
		}
	}
}

func TestFind(t *testing.T) {
	const s = "a=b,weight=1"
	for _, tc := range []struct {
		name               string
		workload, template map[string]string
		want               string
		src                Source
		found              bool
	}{
		{"none", nil, map[string]string{"x": "y"}, "", Source{}, false},
		{"metadata", map[string]string{annotations.Strategy: s}, nil, s, Source{Annotation: annotations.Strategy}, true},
		{"template", nil, map[string]string{annotations.LegacyStrategy: s}, s, Source{Annotation: annotations.LegacyStrategy, Template: true}, true},
		{"metadata before template",
			map[string]string{annotations.LegacyStrategy: "m=1,weight=1"}, map[string]string{annotations.Strategy: s},
			"m=1,weight=1", Source{Annotation: annotations.LegacyStrategy}, true},
		{"new name before legacy on one level",
			map[string]string{annotations.LegacyCamelStrategy: "old=1,weight=1", annotations.Strategy: s}, nil,
			s, Source{Annotation: annotations.Strategy}, true},
		{"seed 000 switch on",
			nil, map[string]string{annotations.LegacyEnabled: "true", annotations.LegacyCamelStrategy: s},
			s, Source{Annotation: annotations.LegacyCamelStrategy, Template: true}, true},
		{"seed 000 switch off",
			nil, map[string]string{annotations.LegacyEnabled: "false", annotations.LegacyCamelStrategy: s},
			"", Source{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, src, found := Find(tc.workload, tc.template)
			if got != tc.want || src != tc.src || found != tc.found {
				t.Errorf("Find = %q, %+v, %v; want %q, %+v, %v", got, src, found, tc.want, tc.src, tc.found)
			}
		})
	}
}

// FuzzParse: nothing panics, and every strategy that parses survives a round
// trip through its canonical form.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3",
		"nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1",
		" a = b , weight = 1 ",
		"a=b,weight=1::",
		"a=,weight=007",
		"a=b,bsae=1,weight=1",
		"a=b,Max=1,weight=1",
		"a=b,base=2,weight=1,max=3:c=d,weight=1",
		"a=b,max=0,weight=1",
		"x.io/y=z,kubernetes.io/arch=arm64,base=2147483647,weight=2147483647",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in)
		if err != nil {
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Parse(%q) returned %T, want *Error", in, err)
			}
			return
		}
		for _, g := range s.Groups {
			for _, l := range g.Labels {
				if r := ReservedKey(l.Key); r != "" {
					t.Fatalf("Parse(%q) took %q, which stands for %q, for a node label", in, l.Key, r)
				}
			}
		}
		out := s.String()
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its format %q does not parse: %v", in, out, err)
		}
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip of %q through %q: %+v != %+v", in, out, s, again)
		}
		if again.String() != out {
			t.Fatalf("format is not stable: %q then %q", out, again.String())
		}
	})
}

// TestReservedKeyTypos: an unprefixed key that is a reserved key up to case,
// or one typo away from it, is refused with the group, the
// item and the key meant; min is refused as reserved. Before, each
// of these was read as a node label and the group silently had base or
// weight 0.
func TestReservedKeyTypos(t *testing.T) {
	for _, tc := range []struct {
		in          string
		group, item int
		want        string
	}{
		{"a=b,bsae=2,weight=1:c=d,weight=3", 1, 2, `did you mean "base"?`},
		{"a=b,weight=1:c=d,wieght=1", 2, 2, `did you mean "weight"?`},
		{"a=b,weigth=1", 1, 2, `did you mean "weight"?`},
		{"a=b,weigt=1", 1, 2, `did you mean "weight"?`},
		{"a=b,weights=1", 1, 2, `did you mean "weight"?`},
		{"a=b,weight=1:c=d,Base=2,weight=1", 2, 2, `did you mean "base"?`},
		{"a=b,WEIGHT=1", 1, 2, `did you mean "weight"?`},
		{"a=b,bas=1,weight=1", 1, 2, `did you mean "base"?`},
		{"a=b,bases=1,weight=1", 1, 2, `did you mean "base"?`},
		{"a=b,weight=1, weigh t =1", 1, 3, `did you mean "weight"?`},
		{"a=b,weight=1,MAX=3", 1, 3, `did you mean "max"?`},
		{"a=b,weight=1:c=d,min=1,weight=1", 2, 2, `"min" is reserved: write base=N for the pods a group gets first`},
	} {
		_, err := Parse(tc.in)
		var perr *Error
		if !errors.As(err, &perr) {
			t.Errorf("Parse(%q) error = %v, want *Error", tc.in, err)
			continue
		}
		if perr.Group != tc.group || perr.Item != tc.item || !strings.Contains(perr.Reason, tc.want) {
			t.Errorf("Parse(%q) = group %d item %d %q, want group %d item %d reason containing %q",
				tc.in, perr.Group, perr.Item, perr.Reason, tc.group, tc.item, tc.want)
		}
	}
	_, err := Parse("karpenter.sh/capacity-type=on-demand,bsae=2,weight=1:karpenter.sh/capacity-type=spot,weight=3")
	want := `invalid strategy: group 1, item 2 "bsae=2": did you mean "base"? A key without a "/" this close to a reserved key is a typo, not a node label`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

// TestReservedKeyLookalikesAreLabels: prefixed keys are never taken for a
// typo, and unprefixed keys further from a reserved key than the rule
// allows stay node labels.
func TestReservedKeyLookalikesAreLabels(t *testing.T) {
	for _, key := range []string{
		"example.com/base", "example.com/weight", "apportion.dev/max", "x.io/wieght", "x.io/Base",
		"name", "node", "zone", "role", "rate", "type", "size", "team", "lifecycle", "nodegroup", "nodesize",
		"mac", "map", "maxx", "mint", "mn", "bin", "in", "basement", "light", "right", "freight", "bright",
	} {
		s, err := Parse(key + "=1,weight=1")
		if err != nil {
			t.Errorf("Parse(%q=1,weight=1): %v, want a node label", key, err)
			continue
		}
		if got := s.Groups[0].Labels; len(got) != 1 || got[0].Key != key {
			t.Errorf("Parse(%q=1,weight=1) labels = %v", key, got)
		}
	}
}

func TestReservedKey(t *testing.T) {
	for key, want := range map[string]string{
		"base": "base", "weight": "weight", "max": "max", "min": "min", "Max": "max",
		"bsae": "base", "vase": "base", "wieght": "weight", "height": "weight", "Weigth": "weight",
		"label": "", "mac": "", "x.io/bsae": "", "": "", "wei": "", "weightless": "", "night": "", "name": "",
	} {
		if got := ReservedKey(key); got != want {
			t.Errorf("ReservedKey(%q) = %q, want %q", key, got, want)
		}
	}
}
