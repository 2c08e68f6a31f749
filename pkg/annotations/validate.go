package annotations

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// MinCapacityTimeout is the shortest CapacityTimeout honoured: Karpenter
// needs some seconds to try a NodePool, and a shorter timeout would take a
// slow launch for an outage.
const MinCapacityTimeout = 30 * time.Second

// Problem is an apportion.dev/* annotation on a workload or its pod template
// that apportion does not take as written.
type Problem struct {
	Key, Value string
	// Why says what is wrong and what apportion does instead.
	Why string
	// Where is the object and field the annotation is written at, e.g.
	// "Deployment web metadata.annotations"; "" when not known.
	Where string
}

func (p Problem) String() string { return p.Key + " " + p.Detail() }

// Located is the problem with where it is written, when known:
// "Deployment web metadata.annotations[apportion.dev/mode] "shadw" is not ...".
func (p Problem) Located() string {
	if p.Where == "" {
		return p.String()
	}
	return p.Where + "[" + p.Key + "] " + p.Detail()
}

// Detail is the problem without the key: the value and why.
func (p Problem) Detail() string { return fmt.Sprintf("%q %s", truncate(p.Value, 64), p.Why) }

// writtenByApportion are keys apportion writes on pods; on a workload or a
// pod template they have no effect (and pods are stripped of them at
// creation).
var writtenByApportion = append([]string{OriginalResources}, DecisionKeys...)

// Check returns the problems of the apportion.dev/* annotations a user set on
// a workload or its pod template: each knob's value outside its range, keys
// only apportion writes, and keys apportion does not know (a typo). The
// strategy annotations are checked by the strategy parser, not here. The
// ranges, as the README documents them:
//
//	apportion.dev/mode              required | preferred | shadow
//	apportion.dev/skip              true | false
//	apportion.dev/rebalance         true | false
//	apportion.dev/architectures     auto
//	apportion.dev/capacity-timeout  a Go duration of at least 30s
//
// Values are compared without case and surrounding spaces. The result is
// sorted by key, so that it reads the same for the same annotations.
func Check(ann map[string]string) []Problem {
	var out []Problem
	for k, v := range ann {
		if !strings.HasPrefix(k, Prefix) {
			continue
		}
		if reason := check(k, v); reason != "" {
			out = append(out, Problem{Key: k, Value: v, Why: reason})
		}
	}
	slices.SortFunc(out, func(a, b Problem) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// check tells what is wrong with the value v of the apportion annotation k,
// or "".
func check(k, v string) string {
	val := strings.ToLower(strings.TrimSpace(v))
	switch {
	case k == Strategy:
	case k == Mode:
		if _, ok := ParseMode(val); !ok {
			return "is not required, preferred or shadow; it is ignored (the policy's or the default mode is used)"
		}
	case k == Skip, k == Rebalance:
		if val != "true" && val != "false" {
			return "is neither true nor false; false is used"
		}
	case k == Architectures:
		if val != ArchitecturesAuto {
			return "is not auto, the only value; it is ignored (a nodeSelector on kubernetes.io/arch pins an architecture)"
		}
	case k == CapacityTimeout:
		return checkCapacityTimeout(v)
	case slices.Contains(writtenByApportion, k):
		return "is written by apportion on the pods it places; set here it has no effect"
	case k == Tolerate:
		return "is read on NodePools only; set here it has no effect"
	default:
		return unknownKey(k)
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func checkCapacityTimeout(v string) string {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	switch {
	case err != nil || d <= 0:
		return "is not a positive duration (such as 5m); --capacity-timeout is used"
	case d < MinCapacityTimeout:
		return fmt.Sprintf("is below the %s floor; %s is used", MinCapacityTimeout, MinCapacityTimeout)
	}
	return ""
}
