//go:build chart

package chartrender

import (
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/pkg/decision"
)

// settings.architectureRules reaches the container as ARCHITECTURE_RULES,
// JSON that apportion accepts; the schema refuses what it would not.
func TestArchitectureRules(t *testing.T) {
	const (
		graviton = `{"arm64":{"taintsToTolerate":[{"key":"arch","value":"arm64","effect":"NoSchedule"}],"requireNodeLabels":{"node-group":"graviton"}}}`
		// The kube-arch-webhook design's list of labels.
		seedShape = `{"arm64":{"taintsToTolerate":[{"key":"ARM","value":"true","effect":"NoExecute"}],"requireNodeLabels":[{"kubernetes.io/arch":"arm64"}]}}`
	)
	for _, tc := range []struct {
		name, value string // value: JSON for --set-json; empty: the default
		want        string // ARCHITECTURE_RULES
		rules       int    // architectures apportion reads from it
	}{
		{name: "default", want: "{}"},
		{name: "a map of labels", value: graviton, want: graviton, rules: 1},
		{name: "a list of labels", value: seedShape, want: seedShape, rules: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var values []string
			if tc.value != "" {
				values = []string{"settings.architectureRules=" + tc.value}
			}
			out, err := helmTemplate(t, chartDir, setJSON(values)...)
			if err != nil {
				t.Fatal(err)
			}
			got := envValue(t, get(t, objects(t, out), "Deployment", release), "ARCHITECTURE_RULES")
			if !sameJSON(t, got, tc.want) {
				t.Errorf("ARCHITECTURE_RULES = %s, want %s", got, tc.want)
			}
			rules, err := decision.ParseArchitectureRules(got)
			if err != nil || len(rules) != tc.rules {
				t.Errorf("apportion reads ARCHITECTURE_RULES=%s as %v, %v; want %d architectures", got, rules, err, tc.rules)
			}
		})
	}

	for _, tc := range []struct {
		name, value, want string
	}{
		{name: "unknown field", value: `{"arm64":{"tolerations":[]}}`, want: "additional properties 'tolerations' not allowed"},
		{name: "bad effect", value: `{"arm64":{"taintsToTolerate":[{"key":"k","effect":"Never"}]}}`, want: "/settings/architectureRules/arm64/taintsToTolerate/0/effect"},
		{name: "bad architecture", value: `{"arm 64":{}}`, want: "invalid propertyName 'arm 64'"},
		{name: "label value not a string", value: `{"arm64":{"requireNodeLabels":{"pool":{"a":"b"}}}}`, want: "/settings/architectureRules/arm64/requireNodeLabels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, chartDir, setJSON([]string{"settings.architectureRules=" + tc.value})...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template: error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
