package controllers

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// logLine is one line of funcr's JSON output.
type logLine map[string]any

// capture returns a logger that appends each line it writes to lines.
func capture(t *testing.T, lines *[]logLine) logr.Logger {
	t.Helper()
	return funcr.NewJSON(func(obj string) {
		var l logLine
		if err := json.Unmarshal([]byte(obj), &l); err != nil {
			t.Fatalf("funcr wrote %q: %v", obj, err)
		}
		*lines = append(*lines, l)
	}, funcr.Options{})
}

// mapperServing is a RESTMapper that knows exactly kinds, as discovery of
// a cluster serving them would.
func mapperServing(kinds ...schema.GroupVersionKind) meta.RESTMapper {
	var gvs []schema.GroupVersion
	for _, k := range kinds {
		gvs = append(gvs, k.GroupVersion())
	}
	m := meta.NewDefaultRESTMapper(gvs)
	for _, k := range kinds {
		m.Add(k, meta.RESTScopeRoot)
	}
	return m
}

var (
	v1beta1NodePool   = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1beta1", Kind: "NodePool"}
	v1alpha5Provision = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1alpha5", Kind: "Provisioner"}
	v1beta1NodeClaim  = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1beta1", Kind: "NodeClaim"}
)

// TestNodeLabelModeNamesPreV1Karpenter: with a Karpenter older than v1.0
// installed, the start says so at error level, naming the API found, what
// apportion supports, what it does instead and what to do; without any
// Karpenter it stays the plain info line.
func TestNodeLabelModeNamesPreV1Karpenter(t *testing.T) {
	cases := []struct {
		name     string
		served   []schema.GroupVersionKind
		found    string // "" = no pre-v1 Karpenter: info line
		releases string
	}{
		{"no Karpenter", nil, "", ""},
		{"only an unrelated karpenter.sh kind", []schema.GroupVersionKind{v1beta1NodeClaim}, "", ""},
		{"v1beta1 NodePool (v0.32 to v0.37)", []schema.GroupVersionKind{v1beta1NodePool, v1beta1NodeClaim}, "karpenter.sh/v1beta1 NodePool", "v0.32 to v0.37"},
		{"v1alpha5 Provisioner (v0.31 and older)", []schema.GroupVersionKind{v1alpha5Provision}, "karpenter.sh/v1alpha5 Provisioner", "v0.31 or older"},
		{"both: the newer is named", []schema.GroupVersionKind{v1alpha5Provision, v1beta1NodePool}, "karpenter.sh/v1beta1 NodePool", "v0.32 to v0.37"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var lines []logLine
			logNodeLabelMode(capture(t, &lines), mapperServing(tc.served...))
			if len(lines) != 1 {
				t.Fatalf("want one line, got %d: %v", len(lines), lines)
			}
			l := lines[0]
			msg, _ := l["msg"].(string)
			_, isError := l["error"]
			if tc.found == "" {
				if isError {
					t.Fatalf("no pre-v1 Karpenter, yet an error line: %v", l)
				}
				if !strings.Contains(msg, "karpenter.sh/v1 NodePool CRD not found") {
					t.Fatalf("want the node-label info line, got %v", l)
				}
				return
			}
			if !isError {
				t.Fatalf("want an error line for %s, got %v", tc.found, l)
			}
			if l["found"] != tc.found || l["karpenterReleases"] != tc.releases {
				t.Errorf("found=%v karpenterReleases=%v, want %q and %q", l["found"], l["karpenterReleases"], tc.found, tc.releases)
			}
			if e, _ := l["error"].(string); !strings.Contains(e, tc.found) {
				t.Errorf("the error %q does not name %s", e, tc.found)
			}
			for _, want := range []string{"v1.0 or newer", "karpenter.sh/v1 NodePools", "node labels alone", "upgrade Karpenter", karpenterUpgradeGuide, "restarts by itself"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
			if s, _ := l["supported"].(string); !strings.Contains(s, "karpenter.sh/v1 NodePool") {
				t.Errorf("supported=%v", l["supported"])
			}
			if s, _ := l["instead"].(string); !strings.Contains(s, "node carries its labels") {
				t.Errorf("instead=%v", l["instead"])
			}
		})
	}
}

// failingMapper fails every lookup as a broken discovery would.
type failingMapper struct{ meta.RESTMapper }

func (failingMapper) RESTMapping(schema.GroupKind, ...string) (*meta.RESTMapping, error) {
	return nil, errors.New("discovery is down")
}

// TestNodeLabelModeDiscoveryErrorIsNoKarpenter: a discovery error is not a
// pre-v1 Karpenter: the start logs the plain info line and goes on.
func TestNodeLabelModeDiscoveryErrorIsNoKarpenter(t *testing.T) {
	var lines []logLine
	logNodeLabelMode(capture(t, &lines), failingMapper{})
	if len(lines) != 1 {
		t.Fatalf("want one line, got %v", lines)
	}
	if _, isError := lines[0]["error"]; isError {
		t.Fatalf("a discovery error was reported as a pre-v1 Karpenter: %v", lines[0])
	}
}
