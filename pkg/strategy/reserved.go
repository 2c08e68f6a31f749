package strategy

import (
	"fmt"
	"strings"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// The keys an item may not use as a node label: base, weight and max, and
// min, which a later option may take. An item's key is read as a node label
// only when it is none of these, written in any case, and, for the longer
// ones, not one typo away either: "bsae=2" or "wieght=1" read as labels
// would leave the group with base or weight 0, and no node carries them.
//
// Only keys without a "/" are candidates: a prefixed key (kubernetes.io/arch,
// karpenter.sh/capacity-type, example.com/base) is never taken for a typo,
// however close, so a node label that looks like a reserved key can always
// be named with a prefix.
const (
	// KeyMax is a group's cap: the most pods it holds.
	KeyMax = "max"
	// KeyMin is reserved: a group's minimum is its base.
	KeyMin = "min"
)

// reserved lists the reserved keys, and for those an item cannot use yet,
// why.
var reserved = []struct{ key, note string }{
	{KeyBase, ""},
	{KeyWeight, ""},
	{KeyMax, ""},
	{KeyMin, "is reserved: write base=N for the pods a group gets first"},
}

// typoMinLen is the shortest reserved key that a typo is matched against.
// Among three-letter keys one edit reaches too many real words (mac, map,
// bin, pin): max and min match only up to case. One edit, not two: two
// reach light, right and freight from weight.
const typoMinLen = 4

// ReservedKey returns the reserved key that key stands for: key itself
// up to case, or, for base and weight, a key one typo away (a letter
// missing, added, wrong, or two swapped). "" when key has a "/" or is
// none of these: a node label.
func ReservedKey(key string) string {
	if strings.Contains(key, "/") || len(key) > len(KeyWeight)+1 {
		return ""
	}
	lower := strings.ToLower(key)
	for _, r := range reserved {
		if lower == r.key || len(r.key) >= typoMinLen && annotations.TypoDistance(lower, r.key) <= 1 {
			return r.key
		}
	}
	return ""
}

// KeyFault is the reason an item or a structured group may not use k as a
// node label key, "" when it may.
func KeyFault(k string) string {
	r := ReservedKey(k)
	if r == "" {
		return ""
	}
	note := ""
	for _, e := range reserved {
		if e.key == r {
			note = e.note
		}
	}
	switch {
	case k == r && note == "":
		return fmt.Sprintf("%q is reserved, not a node label", r)
	case k == r:
		return fmt.Sprintf("%q %s", r, note)
	case note != "":
		return fmt.Sprintf("did you mean %q? %q %s", r, r, note)
	default:
		return fmt.Sprintf(`did you mean %q? A key without a "/" this close to a reserved key is a typo, not a node label`, r)
	}
}
