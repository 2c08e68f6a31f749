//go:build chart

package chartrender

import (
	"strings"
	"testing"
	"time"
)

// settings.driftAfter reaches the container as DRIFT_AFTER, a duration
// apportion accepts; the schema refuses what is not one.
func TestDriftAfter(t *testing.T) {
	for _, tc := range []struct {
		name, value string // value: --set-json; empty: the default
		want        time.Duration
	}{
		{name: "default", want: 10 * time.Minute},
		{name: "set", value: `"30m"`, want: 30 * time.Minute},
		{name: "off", value: `"0s"`, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var values []string
			if tc.value != "" {
				values = []string{"settings.driftAfter=" + tc.value}
			}
			out, err := helmTemplate(t, chartDir, setJSON(values)...)
			if err != nil {
				t.Fatal(err)
			}
			got := envValue(t, get(t, objects(t, out), "Deployment", release), "DRIFT_AFTER")
			if d, err := time.ParseDuration(got); err != nil || d != tc.want {
				t.Errorf("DRIFT_AFTER = %q (%v, %v), want %v", got, d, err, tc.want)
			}
		})
	}
	_, err := helmTemplate(t, chartDir, setJSON([]string{`settings.driftAfter="ten minutes"`})...)
	if err == nil || !strings.Contains(err.Error(), "driftAfter") {
		t.Errorf("helm template with driftAfter \"ten minutes\": error %v, want one naming driftAfter", err)
	}
}
