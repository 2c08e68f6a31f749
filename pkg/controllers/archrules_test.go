package controllers

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/apportion-dev/apportion/pkg/options"
)

// TestArchitectureRulesNodeLabelModeOnly: the rules reach the placement
// controller in node-label mode only; with Karpenter (or with no image
// inspected) they are dropped with one log line saying why.
func TestArchitectureRulesNodeLabelModeOnly(t *testing.T) {
	const rules = `{"arm64":{"requireNodeLabels":{"node-group":"graviton"}}}`
	for _, tc := range []struct {
		name      string
		args      []string
		nodePools bool
		use       bool
		log       string // in the one line logged; empty: nothing logged
	}{
		{name: "node-label mode", args: []string{"--architecture-rules=" + rules}, use: true},
		{name: "karpenter", args: []string{"--architecture-rules=" + rules}, nodePools: true, log: "ignored with Karpenter"},
		{name: "no image inspected", args: []string{"--architecture-rules=" + rules, "--architectures=off"}, log: "ignored with --architectures=off"},
		{name: "none set, karpenter", nodePools: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o options.Options
			fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.AddFlags(fs)
			if err := fs.Parse(append([]string{"--cert-dir=" + t.TempDir()}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			// The cert dir is empty: only the other options must be valid.
			if err := o.Validate(); err != nil && !strings.Contains(err.Error(), "--cert-dir") {
				t.Fatal(err)
			}
			var lines []logLine
			got := architectureRules(capture(t, &lines), &o, tc.nodePools)
			if use := len(got) > 0; use != tc.use {
				t.Errorf("rules %v: used %t, want %t", got, use, tc.use)
			}
			switch {
			case tc.log == "" && len(lines) != 0:
				t.Errorf("logged %v, want nothing", lines)
			case tc.log != "" && (len(lines) != 1 || !strings.Contains(lines[0]["msg"].(string), tc.log)):
				t.Errorf("logged %v, want one line with %q", lines, tc.log)
			}
		})
	}
}
