package imagearch

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func BenchmarkCachedLookup(b *testing.B) {
	in := newTestInspector(nil, Options{})
	ref := "registry.example.com/team/app:v1.2.3"
	in.put(ref, &entry{platforms: []Platform{platform("linux", "amd64", ""), platform("linux", "arm64", "v8")}, fetched: in.opts.Clock.Now()})
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		ps, err := in.Platforms(ctx, ref, corev1.PullIfNotPresent, Credentials{Namespace: "team"})
		if err != nil || len(ps) != 2 {
			b.Fatal(ps, err)
		}
	}
}

func BenchmarkCachedLookupParallel(b *testing.B) {
	in := newTestInspector(nil, Options{})
	ref := "registry.example.com/team/app:v1.2.3"
	in.put(ref, &entry{platforms: []Platform{platform("linux", "amd64", "")}, fetched: in.opts.Clock.Now()})
	ctx := b.Context()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := in.Platforms(ctx, ref, corev1.PullIfNotPresent, Credentials{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCacheMemory reports the heap held per cached image: 10,000 tag
// references of ~50 bytes, each with three platforms whose strings come from
// a decoder (fresh copies, as JSON decoding makes them), stored as fetch
// stores them.
func BenchmarkCacheMemory(b *testing.B) {
	const n = 10000
	for b.Loop() {
		in := newTestInspector(nil, Options{CacheSize: n})
		refs := make([]string, n)
		for k := range refs {
			refs[k] = fmt.Sprintf("123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/service-%05d:v1.2.3", k)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, ref := range refs {
			ps := []Platform{
				platform(strings.Clone("linux"), strings.Clone("amd64"), ""),
				platform(strings.Clone("linux"), strings.Clone("arm64"), strings.Clone("v8")),
				platform(strings.Clone("linux"), strings.Clone("arm"), strings.Clone("v7")),
			}
			in.put(ref, &entry{platforms: ps, fetched: in.opts.Clock.Now()})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if in.Len() != n {
			b.Fatalf("Len = %d", in.Len())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/image")
		runtime.KeepAlive(in)
		runtime.KeepAlive(refs)
	}
}
