package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchStrategy is the AWS sample webhook's strategy.
const benchStrategy = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// benchWorkloads is how many Deployments a benchmark previews.
const benchWorkloads = 1000

// benchManifests writes benchWorkloads Deployments carrying benchStrategy to
// a file, and returns its path.
func benchManifests(b *testing.B) string {
	b.Helper()
	var sb strings.Builder
	for i := range benchWorkloads {
		fmt.Fprintf(&sb, "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-%d\n  namespace: shop\n  annotations: {apportion.dev/strategy: %q}\nspec:\n  replicas: 3\n", i, benchStrategy)
	}
	path := filepath.Join(b.TempDir(), "deployments.yaml")
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// benchPlan runs `apportion plan args...`, its output discarded.
func benchPlan(b *testing.B, args ...string) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		var stderr strings.Builder
		if code := Main(append([]string{"plan"}, args...), strings.NewReader(""), io.Discard, &stderr); code != 0 {
			b.Fatalf("plan %q: exit status %d: %s", args, code, stderr.String())
		}
	}
}

// plan -f of 1,000 Deployments at --replicas 1000000 (the flag's limit).
func BenchmarkPlanManifests1000x1e6JSON(b *testing.B) {
	benchPlan(b, "-f", benchManifests(b), "--replicas", "1000000", "-o", "json")
}

func BenchmarkPlanManifests1000x1e6YAML(b *testing.B) {
	benchPlan(b, "-f", benchManifests(b), "--replicas", "1000000", "-o", "yaml")
}

func BenchmarkPlanManifests1000x1e6Wide(b *testing.B) {
	benchPlan(b, "-f", benchManifests(b), "--replicas", "1000000", "-o", "wide")
}

// The same at 10,000 replicas.
func BenchmarkPlanManifests1000x1e4JSON(b *testing.B) {
	benchPlan(b, "-f", benchManifests(b), "--replicas", "10000", "-o", "json")
}

// One strategy at --replicas 1000000: the sequence of 1,000,000 groups is
// the output.
func BenchmarkPlan1e6JSON(b *testing.B) {
	benchPlan(b, "--strategy", benchStrategy, "--replicas", "1000000", "-o", "json")
}

func BenchmarkPlan1e6YAML(b *testing.B) {
	benchPlan(b, "--strategy", benchStrategy, "--replicas", "1000000", "-o", "yaml")
}

func BenchmarkPlan1e6Wide(b *testing.B) {
	benchPlan(b, "--strategy", benchStrategy, "--replicas", "1000000", "-o", "wide")
}
