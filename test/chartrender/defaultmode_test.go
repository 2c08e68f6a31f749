//go:build chart

package chartrender

import (
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// settings.defaultMode reaches the container as DEFAULT_MODE, a mode
// apportion reads; the schema refuses any other value.
func TestDefaultMode(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{want: "required"},
		{set: "shadow", want: "shadow"},
		{set: "preferred", want: "preferred"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			var flags []string
			if tc.set != "" {
				flags = []string{"--set", "settings.defaultMode=" + tc.set}
			}
			out, err := helmTemplate(t, chartDir, flags...)
			if err != nil {
				t.Fatal(err)
			}
			got := envValue(t, get(t, objects(t, out), "Deployment", release), "DEFAULT_MODE")
			if m, ok := annotations.ParseMode(got); got != tc.want || !ok || m != tc.want {
				t.Errorf("DEFAULT_MODE = %q, want %q", got, tc.want)
			}
		})
	}
	_, err := helmTemplate(t, chartDir, "--set", "settings.defaultMode=dry-run")
	if err == nil || !strings.Contains(err.Error(), "/settings/defaultMode") {
		t.Errorf("helm template with defaultMode=dry-run: error %v, want the schema's", err)
	}
}
