package annotations

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		ann  map[string]string
		want string // the problems' keys, comma-separated
	}{
		{map[string]string{Rebalance: "true", Skip: " False ", Mode: "Preferred", Architectures: "AUTO", CapacityTimeout: "2m", Strategy: "not checked here", "team": "x"}, ""},
		{map[string]string{Rebalance: "yes"}, Rebalance},
		{map[string]string{Skip: "1"}, Skip},
		{map[string]string{Mode: "prefered"}, Mode},
		{map[string]string{Mode: " Shadow "}, ""},
		{map[string]string{Shadow: "{}"}, Shadow},
		{map[string]string{Architectures: "arm64"}, Architectures},
		{map[string]string{CapacityTimeout: "10s"}, CapacityTimeout},
		{map[string]string{CapacityTimeout: "5 minutes"}, CapacityTimeout},
		{map[string]string{CapacityTimeout: "-1m"}, CapacityTimeout},
		{map[string]string{Group: "karpenter.sh/capacity-type=spot", Fallback: "x"}, Fallback + "," + Group},
		{map[string]string{Prefix + "stratgy": "a=b,weight=1"}, Prefix + "stratgy"},
		{map[string]string{Tolerate: "true"}, Tolerate},
	} {
		var keys []string
		for _, p := range Check(tc.ann) {
			keys = append(keys, p.Key)
			if p.Why == "" || !strings.HasPrefix(p.String(), p.Key+" ") {
				t.Errorf("%v: problem %q has no explanation", tc.ann, p)
			}
		}
		if got := strings.Join(keys, ","); got != tc.want {
			t.Errorf("Check(%v) = %s, want %s", tc.ann, got, tc.want)
		}
	}
	p := Check(map[string]string{Rebalance: "yes"})[0]
	if p.String() != `apportion.dev/rebalance "yes" is neither true nor false; false is used` {
		t.Errorf("message %q", p)
	}
	if long := Check(map[string]string{Mode: strings.Repeat("x", 1000)})[0].String(); len(long) > 200 {
		t.Errorf("message not bounded: %d bytes", len(long))
	}
}
