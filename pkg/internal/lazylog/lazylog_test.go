package lazylog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// counting wraps a sink and counts WithValues calls: the eager encoding
// the wrapper must defer.
type counting struct {
	logr.LogSink
	withValues *int
}

func (c counting) WithValues(kv ...any) logr.LogSink {
	*c.withValues++
	return counting{LogSink: c.LogSink.WithValues(kv...), withValues: c.withValues}
}

func (c counting) WithName(name string) logr.LogSink {
	return counting{LogSink: c.LogSink.WithName(name), withValues: c.withValues}
}

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestValuesDeferredUntilALine: values added to a wrapped logger reach the
// underlying sink only when a line is written, and the lines carry every
// value, the name, and each derived logger's own values only.
func TestValuesDeferredUntilALine(t *testing.T) {
	var buf bytes.Buffer
	n := 0
	base := zap.New(zap.WriteTo(&buf), zap.Level(zapcore.InfoLevel))
	logger := New(logr.New(counting{LogSink: base.GetSink(), withValues: &n}))

	parent := logger.WithValues("controller", "placement")
	a := parent.WithValues("name", "a", "reconcileID", "1")
	b := parent.WithValues("name", "b")
	a.V(1).Info("not written")
	if n != 0 {
		t.Fatalf("%d WithValues calls on the underlying sink before any line was written, want 0", n)
	}
	a.Info("decided", "group", "spot")
	b.WithName("sub").Error(errors.New("boom"), "failed")
	if n != 2 {
		t.Fatalf("%d WithValues calls for two lines, want 2", n)
	}
	got := lines(t, &buf)
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2: %s", len(got), buf.String())
	}
	if got[0]["controller"] != "placement" || got[0]["name"] != "a" || got[0]["reconcileID"] != "1" || got[0]["group"] != "spot" {
		t.Errorf("first line %v", got[0])
	}
	if got[1]["name"] != "b" || got[1]["reconcileID"] != nil || got[1]["logger"] != "sub" || got[1]["error"] != "boom" {
		t.Errorf("second line %v", got[1])
	}
}

// BenchmarkReconcileLogger: what controller-runtime does per reconcile
// (the object's names, then a reconcile ID) and a debug line that is not
// written, with the values encoded eagerly (zap) and deferred (New).
func BenchmarkReconcileLogger(b *testing.B) {
	base := zap.New(zap.WriteTo(io.Discard), zap.Level(zapcore.InfoLevel)).WithValues("controller", "placement")
	for name, logger := range map[string]logr.Logger{"eager": base, "lazy": New(base)} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l := logger.WithValues("Pod", "web/app-1", "namespace", "web", "name", "app-1").WithValues("reconcileID", "6d1c0b7e")
				l.V(1).Info("decided", "group", "spot")
			}
		})
	}
}
